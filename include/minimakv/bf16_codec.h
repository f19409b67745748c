// BF16 vector codec: the dense control format. Round to nearest even, no scale.
#pragma once

#include <cstdint>

#include "minimakv/status.h"

namespace minimakv {

// InvalidArgument if x holds NaN/Inf (naming the coordinate). codes: head_dim values.
Status Bf16EncodeVector(const float* x, int head_dim, uint16_t* codes);
void Bf16DecodeVector(const uint16_t* codes, int head_dim, float* x);

// InvalidArgument naming the first non-finite coordinate of x, or OK. `what` names the buffer in the message.
Status CheckFinite(const float* x, int n, const char* what);

}  // namespace minimakv
