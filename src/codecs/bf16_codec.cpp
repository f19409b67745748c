#include "minimakv/bf16_codec.h"

#include <cmath>
#include <string>

#include "minimakv/scalar_formats.h"

namespace minimakv {

Status CheckFinite(const float* x, int n, const char* what) {
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return Status::InvalidArgument(std::string(what) + " holds a non-finite value (" + std::to_string(x[i]) +
                                     ") at coordinate " + std::to_string(i));
    }
  }
  return Status::Ok();
}

Status Bf16EncodeVector(const float* x, int head_dim, uint16_t* codes) {
  MINIMAKV_RETURN_IF_ERROR(CheckFinite(x, head_dim, "bf16 input vector"));
  for (int i = 0; i < head_dim; ++i) codes[i] = FloatToBf16(x[i]);
  return Status::Ok();
}

void Bf16DecodeVector(const uint16_t* codes, int head_dim, float* x) {
  for (int i = 0; i < head_dim; ++i) x[i] = Bf16ToFloat(codes[i]);
}

}  // namespace minimakv
