#include "minimakv/fp8_codec.h"

#include <cmath>

#include "minimakv/bf16_codec.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {

Status Fp8EncodeVector(const float* x, int head_dim, uint8_t* codes, float* scale) {
  MINIMAKV_RETURN_IF_ERROR(CheckFinite(x, head_dim, "fp8 input vector"));
  float amax = 0.0f;
  for (int i = 0; i < head_dim; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  if (amax == 0.0f) {
    for (int i = 0; i < head_dim; ++i) codes[i] = 0;
    *scale = 0.0f;
    return Status::Ok();
  }
  const float s = amax / kE4m3MaxFinite;
  for (int i = 0; i < head_dim; ++i) codes[i] = FloatToE4m3(x[i] / s);
  *scale = s;
  return Status::Ok();
}

void Fp8DecodeVector(const uint8_t* codes, float scale, int head_dim, float* x) {
  for (int i = 0; i < head_dim; ++i) x[i] = E4m3ToFloat(codes[i]) * scale;
}

}  // namespace minimakv
