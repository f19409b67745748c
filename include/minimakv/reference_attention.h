// Materializing reference attention, for tests and quality control only: decodes every page of the views with
// the codecs' own decode functions (TQ3 back to the original domain) and runs softmax attention in fp64.
// It builds dense copies of the cache on purpose; production paths use cpu_attention.h instead.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/attention_batch.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/status.h"

namespace minimakv {

// Decodes the tokens of sequence `seq`, KV head `kv_head` of a view, in listed page order.
//   keys, values  resized to [tokens][head_dim], fp32 (the exact values the codecs reconstruct)
// rotation is required for TQ3.
Status DequantizeViewHead(const PagedKvView& view, const HadamardRotation* rotation, int seq, int kv_head,
                          std::vector<float>* keys, std::vector<float>* values);

// fp64 softmax attention of one query over n keys/values.
//   q [head_dim], keys/values [n][head_dim]; out [head_dim]; weights (optional) resized to [n]
// Returns lse_log2 = log2(sum_k exp(scale q.k_k)); n = 0 gives -inf and a zero output.
double DenseAttentionF64(const float* q, const float* keys, const float* values, int64_t n, int head_dim,
                         double sm_scale, double* out, std::vector<double>* weights);

// Reference over the union of the views (same contract as AttendMixedCpu, fp64 results).
//   out       resized to [total_q][num_q_heads][head_dim]
//   lse_log2  resized to [total_q][num_q_heads]
Status ReferenceAttention(std::span<const PagedKvView> views, const AttentionQueries& queries,
                          const HadamardRotation* rotation, std::vector<double>* out,
                          std::vector<double>* lse_log2);

}  // namespace minimakv
