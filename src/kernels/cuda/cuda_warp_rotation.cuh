// Warp-cooperative pieces shared by the CUDA kernels: one head vector per warp in the "strided" layout
// (lane holds coordinates lane + 32 k, k < head_dim / 32), the Hadamard butterfly and the pairwise tree sum in
// exactly the CPU order (hadamard_rotation.h, tq3_codec.h), so results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "minimakv/cuda_cache_ops.h"

namespace minimakv {
namespace cuda_detail {

inline constexpr unsigned kFullWarpMask = 0xFFFFFFFFu;
inline constexpr int kWarpSize = 32;

__device__ inline float SignOf(const CudaSignBits& bits, int coordinate) {
  return (bits.words[coordinate >> 5] >> (coordinate & 31)) & 1u ? -1.0f : 1.0f;
}

// Unnormalized Walsh-Hadamard transform of v (coordinate lane + 32 k in v[k]). Pass h = 1..d/2 as the CPU: in a
// pass each pair (j, j + h), j without bit h, becomes (a + b, a - b), a the lower coordinate. Passes h < 32 pair
// lanes (xor h), passes h >= 32 pair registers k and k ^ (h / 32) of one lane.
template <int kHeadDim>
__device__ inline void WarpFwht(float (&v)[kHeadDim / kWarpSize], int lane) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
#pragma unroll
  for (int h = 1; h < kWarpSize; h *= 2) {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const float other = __shfl_xor_sync(kFullWarpMask, v[k], h);
      v[k] = (lane & h) ? __fsub_rn(other, v[k]) : __fadd_rn(v[k], other);
    }
  }
#pragma unroll
  for (int hk = 1; hk < kPerLane; hk *= 2) {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      if (k & hk) continue;
      const float a = v[k];
      const float b = v[k + hk];
      v[k] = __fadd_rn(a, b);
      v[k + hk] = __fsub_rn(a, b);
    }
  }
}

// Tq3TreeSum of the d values (strides d/2 .. 1, v[i] += v[i + stride]); every lane returns the total. Strides
// >= 32 add registers, strides < 32 add lanes; xor pairing gives the upper lane the same (commutative) sum.
template <int kHeadDim>
__device__ inline float WarpTreeSum(float (&v)[kHeadDim / kWarpSize]) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
#pragma unroll
  for (int sk = kPerLane / 2; sk > 0; sk /= 2) {
#pragma unroll
    for (int k = 0; k < sk; ++k) v[k] = __fadd_rn(v[k], v[k + sk]);
  }
  float total = v[0];
#pragma unroll
  for (int stride = kWarpSize / 2; stride > 0; stride /= 2) {
    total = __fadd_rn(total, __shfl_xor_sync(kFullWarpMask, total, stride));
  }
  return total;
}

}  // namespace cuda_detail
}  // namespace minimakv
