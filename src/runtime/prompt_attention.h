// Causal attention of a chunk of query tokens over contiguous fp32 keys/values (private to the runtime):
// the in-prompt part of prefill (paged modes: the chunk's own K/V) and all of dense mode's attention.
//
// Query token t (0 <= t < tokens) of head h attends keys [0, key_offset + t] of KV head h / group.
//   AVX-512 path (head_dim a multiple of 16, <= 128, GQA group <= 48): flash-style. A work item is one KV
//     head x a tile of query tokens; its rows (token, q head of the group) share every K/V load. Keys are
//     transposed once per call into 64-key tiles [dim][64] so that 4 query rows x 64 keys of scores sit in 16
//     zmm registers; softmax is online (running max and sum per row), values accumulate 4 rows x 64 dims.
//     Items go out heaviest (latest tokens) first, one at a time, so both threads finish together.
//   Scalar path (reference, and the fallback): one query at a time, full score row, max, sum in double.
// With round_weights_fp16 (dense mode's llama.cpp f16 emulation) the normalized weights are rounded to fp16
// before the value sum, as llama.cpp's non-flash f16 path does; the SIMD path then makes three passes over
// the keys (exact max, sum of exponentials, weighted values) so that each weight is exp(s - max) / sum as in
// the reference, not an online-rescaled value.
// Results of the two paths differ only by fp32 summation order and the SIMD exp's rounding (a few ulp).
#pragma once

#include <cstdint>
#include <vector>

#include "minimakv/thread_pool.h"

namespace minimakv {

struct PromptAttentionArgs {
  const float* q = nullptr;  // [tokens][num_q_heads * head_dim]
  const float* k = nullptr;  // key j of KV head g at k + j * kv_stride + g * head_dim
  const float* v = nullptr;  // same layout as k
  int64_t kv_stride = 0;     // floats from one key to the next
  int64_t tokens = 0;
  int64_t key_offset = 0;    // query token t attends keys [0, key_offset + t]
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float sm_scale = 1.0f;
  bool round_weights_fp16 = false;
  float* out = nullptr;       // [tokens][num_q_heads * head_dim], normalized
  float* lse_log2 = nullptr;  // [tokens][num_q_heads] base-2 LSE of the scaled scores, or null
};

// Reused between calls (transposed key tiles).
struct PromptAttentionScratch {
  std::vector<float> keys_transposed;
};

// True when the AVX-512 path runs for this shape on this CPU.
bool PromptAttentionUsesSimd(int head_dim, int group);

void PromptAttention(const PromptAttentionArgs& args, ThreadPool* pool, PromptAttentionScratch* scratch,
                     bool force_scalar = false);

}  // namespace minimakv
