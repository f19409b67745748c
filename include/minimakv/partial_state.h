// PartialState: the softmax state of attention over a subset of tokens, for one (query token, query head).
//   out       [head_dim]  the normalized output: sum_k p_k v_k / sum_k p_k over the subset
//   lse_log2  log2(sum_k 2^(s_k)), s_k = (q . k_k) * sm_scale * log2(e)   -- BASE 2 (as FlashInfer's
//             merge_state; vLLM's merge_attn_states uses natural log: multiply by ln 2 to convert)
// An empty subset is lse_log2 = -inf with out = 0. Every format's kernel (CPU and CUDA) writes this type and
// one merge combines them, so the result is softmax attention over the union of the subsets.
#pragma once

#include <cmath>

#include "minimakv/host_device.h"

namespace minimakv {

inline constexpr float kLog2e = 1.4426950408889634f;  // log2(e): turns natural-exp scores into base-2 ones

// Merges state b into state a, in place: a <- a (+) b. Commutative exactly (both operands are treated
// symmetrically); associative up to fp32 rounding.
// Edge cases: empty (-inf) with empty stays empty with zero output, never NaN from (-inf) - (-inf);
// +inf against finite takes the +inf side; +inf with +inf averages the two outputs.
MINIMAKV_HOST_DEVICE inline void MergePartialState(float* out_a, float* lse_log2_a, const float* out_b,
                                                    float lse_log2_b, int head_dim) {
  const float la = *lse_log2_a;
  const float lb = lse_log2_b;
  const float m = la > lb ? la : lb;
  if (m == -INFINITY) {  // both empty
    for (int i = 0; i < head_dim; ++i) out_a[i] = 0.0f;
    return;
  }
  float wa;
  float wb;
  if (m == INFINITY) {
    wa = la == INFINITY ? 1.0f : 0.0f;
    wb = lb == INFINITY ? 1.0f : 0.0f;
  } else {
    wa = exp2f(la - m);  // exp2(-inf) = 0 for an empty side
    wb = exp2f(lb - m);
  }
  const float inv = 1.0f / (wa + wb);
  for (int i = 0; i < head_dim; ++i) {
    const float oa = wa == 0.0f ? 0.0f : out_a[i] * wa;  // 0 * garbage from an empty side stays 0
    const float ob = wb == 0.0f ? 0.0f : out_b[i] * wb;
    out_a[i] = (oa + ob) * inv;
  }
  *lse_log2_a = m == INFINITY ? INFINITY : m + log2f(wa + wb);
}

}  // namespace minimakv
