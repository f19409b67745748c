#include "minimakv/tq3_codec.h"

#include <cmath>
#include <cstring>
#include <string>

#include "minimakv/bf16_codec.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {

Status Tq3EncodeVector(const HadamardRotation& rotation, const float* x, uint8_t* codes, uint16_t* scale_fp16) {
  const int d = rotation.head_dim();
  MINIMAKV_RETURN_IF_ERROR(CheckFinite(x, d, "tq3 input vector"));
  float y[256];
  float work[256];
  rotation.Forward(x, y);
  for (int i = 0; i < d; ++i) work[i] = y[i] * y[i];
  const float norm = std::sqrt(Tq3TreeSum(work, d));
  uint32_t words[3 * 256 / 32] = {};
  if (norm == 0.0f) {
    std::memcpy(codes, words, size_t(Tq3CodeBytes(d)));
    *scale_fp16 = 0;
    return Status::Ok();
  }
  const float unit_scale = float(std::sqrt(double(d))) / norm;
  for (int i = 0; i < d; ++i) {
    const int index = Tq3Quantize(y[i] * unit_scale);
    Tq3SetIndex(words, i, index);
    const float c = Tq3Centroid(index);
    work[i] = c * c;
  }
  const float scale = norm / std::sqrt(Tq3TreeSum(work, d));
  if (!(scale <= kFp16MaxFinite)) {
    return Status::InvalidArgument("tq3 input vector norm " + std::to_string(norm) +
                                   " is too large for the fp16 scale (max scale 65504)");
  }
  std::memcpy(codes, words, size_t(Tq3CodeBytes(d)));
  *scale_fp16 = FloatToFp16(scale);
  return Status::Ok();
}

void Tq3DecodeRotated(const uint8_t* codes, uint16_t scale_fp16, int head_dim, float* y_hat) {
  uint32_t words[3 * 256 / 32];
  std::memcpy(words, codes, size_t(Tq3CodeBytes(head_dim)));
  const float scale = Fp16ToFloat(scale_fp16);
  for (int i = 0; i < head_dim; ++i) y_hat[i] = scale * Tq3Centroid(Tq3GetIndex(words, i));
}

void Tq3DecodeVector(const HadamardRotation& rotation, const uint8_t* codes, uint16_t scale_fp16, float* x_hat) {
  Tq3DecodeRotated(codes, scale_fp16, rotation.head_dim(), x_hat);
  rotation.Inverse(x_hat, x_hat);
}

}  // namespace minimakv
