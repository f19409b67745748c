// FP8 E4M3 vector codec with one fp32 scale per vector (per token and head), so appends never re-scale
// older tokens. scale = amax / 448; code_i = E4M3(x_i / scale); decode x_i = E4M3ToFloat(code_i) * scale.
// A zero vector stores scale 0.
#pragma once

#include <cstdint>

#include "minimakv/status.h"

namespace minimakv {

// InvalidArgument if x holds NaN/Inf (naming the coordinate). codes: head_dim bytes.
Status Fp8EncodeVector(const float* x, int head_dim, uint8_t* codes, float* scale);
void Fp8DecodeVector(const uint8_t* codes, float scale, int head_dim, float* x);

}  // namespace minimakv
