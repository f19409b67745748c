// AttentionBatch: the queries of one attention call and the partial states it writes.
// Each sequence s has q_len(s) >= 0 query tokens; every query token attends to ALL cached tokens of its
// sequence (no mask: cached tokens precede the queries). Chunked prefill merges this with its own causal
// in-chunk part through MergePartialState.
#pragma once

#include <cstdint>

namespace minimakv {

struct AttentionQueries {
  const float* q = nullptr;               // [total_q_tokens][num_q_heads][head_dim], original (unrotated) domain
  const int32_t* q_indptr = nullptr;      // [num_seqs + 1]: seq s owns query tokens [q_indptr[s], q_indptr[s+1])
  int num_seqs = 0;
  int num_q_heads = 0;                    // a multiple of the view's kv_heads; query head h uses KV head h / group
  float sm_scale = 0.0f;                  // softmax scale, usually 1/sqrt(head_dim)
};

struct PartialStatesOut {
  float* out = nullptr;       // [total_q_tokens][num_q_heads][head_dim] normalized outputs, original domain
  float* lse_log2 = nullptr;  // [total_q_tokens][num_q_heads] base-2 LSE (partial_state.h)
};

}  // namespace minimakv
