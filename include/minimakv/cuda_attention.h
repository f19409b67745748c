// CUDA decode attention over a mixed-format paged KV cache: one partial kernel per format (BF16, FP8, TQ3 in the
// rotated domain) split over pages, then one merge kernel (base-2 LSE, partial_state.h) that also applies the one
// inverse Hadamard rotation per head the TQ3 part needs.
//
// Plan / Upload / Run, as FlashInfer: CudaDecodePlan::Create runs on the host from host copies of the views'
// lengths and decides the work split (page chunks per sequence and format) and the workspace size; Upload copies
// the work lists into the workspace; CudaDecodeRun only launches kernels, so it can be captured in a CUDA graph
// and replayed as long as the lengths (hence the plan) do not change.
//
// Scope: decode: query_tokens (default 1) query tokens per sequence, every one attending to all cached tokens of its
// sequence (speculative decoding's verification step: the draft tokens' in-chunk causal part is the caller's, merged
// through partial_state.h as in cpu_attention.h). Sequence s owns query tokens [s * query_tokens, (s + 1) *
// query_tokens); AttentionQueries' q_indptr of the CPU path is this uniform split.
// Session 16: several query tokens of a sequence run as a larger GQA group of "query rows" (group * query_tokens
// rows per KV head, token-major inside the KV head), so the K / V pages are read once for all of them (as long as
// the rows fit one CTA); with query_tokens > 1 a copy kernel puts the queries into that order in the workspace
// before the partial kernels, and the merge writes each output row back at its caller's [token][head] place
// (session 17; session 16 had a second copy kernel for that).
// REQUIRES: head_dim 64, 128 or 256 (64 since v16: one K block of 4 k-steps, not tuned); num_q_heads a multiple of
// kv_heads; query rows per KV head (num_q_heads / kv_heads * query_tokens) at most 64; page_tokens a multiple of 16
// (the key tile); every view of one plan shares kv_heads and head_dim.
// Large groups (v16, v17): an MMA head tile holds 8 query heads. BF16 (every head_dim) and FP8 / TQ3 at head_dim
// 64 / 128 run up to two tiles (16 heads) in one CTA that reads the K / V pages once (and expands them once) for both
// (v17); FP8 / TQ3 at head_dim 256 take one tile (8 heads) per CTA. A KV head's group larger than that is split into
// head_ctas(v) CTAs of near-equal size (16 per CTA: 24 -> 12 + 12, 64 -> 4 x 16; 8: 16 -> 8 + 8, 12 -> 6 + 6).
// Cost: each CTA of a KV head reads its pages again, so the KV bytes requested are head_ctas(v) x those of one read
// (the CTAs of a KV head are neighbours in the grid and run in the same wave, so L2 serves part of the repeat reads).
// Workspace and merge are unchanged (partial states are per query head either way).
//
// Numerics: scores via tensor-core MMA with fp32 (or exact int32) accumulation. BF16 pages: bf16 m16n8k16 with the
// query split in two bf16 parts (hi + lo, ~fp32 precision) and the probabilities likewise. FP8 pages: fp16
// m16n8k16 (E4M3 codes convert exactly; query hi + lo). TQ3 pages: keys on the int8 tensor cores (m16n8k32 s8):
// the codec's centroid units (13, 40, 71, 114, tq3_codec.h) are exact int8 operands and the query, per head, a
// 24-bit fixed point in three int8 digits, so a score is exact up to the query's rounding to 24 bits and one fp32
// rounding (docs/cuda-notes.md v15); TQ3 values: fp16 m16n8k16 with the units (exact in fp16) against fp16
// probabilities. Per-vector scales are applied to scores (K) and folded into the probabilities (V).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "minimakv/attention_batch.h"
#include "minimakv/kv_format.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/status.h"

namespace minimakv {

inline constexpr int kCudaMaxViews = 3;        // one per KvFormat
inline constexpr int kCudaKeyTileTokens = 16;  // keys per MMA tile; page_tokens must be a multiple

// CTA shape of the TQ3 partial kernel where several exist (head_dim 128, groups <= 8; docs/cuda-notes.md v23, v27):
// narrow CTAs of 4 warps, several per SM; one wide CTA per SM with all their warps; or (groups of 4 and an even
// number of KV heads, head_dim 128 or, since v28, 64; since session 15 groups of 1-4) paired CTAs, each running the
// kernel of twice the head_dim over two adjacent KV heads so that the 8 MMA columns hold both heads' query heads
// (all 8 at group 4). kAuto lets the plan choose; the others force one where it exists (tests, A/B).
enum class CudaTq3Ctas { kAuto, kNarrow, kWide, kPaired };

struct CudaDecodeShape {
  int num_seqs = 0;
  int num_q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float sm_scale = 0.0f;               // softmax scale, usually 1/sqrt(head_dim)
  uint64_t rotation_seed = 0;          // HadamardRotation seed of the TQ3 pages (ignored without a TQ3 view)
  CudaTq3Ctas tq3_ctas = CudaTq3Ctas::kAuto;
  int query_tokens = 1;                // query tokens per sequence (>= 1; see Scope above)
};

// Host copies of one view's lengths (the same arrays as the device PagedKvView), for planning only.
struct CudaViewLengths {
  KvFormat format = KvFormat::kBf16;
  int page_tokens = 0;
  const int32_t* page_indptr = nullptr;       // host [num_seqs + 1]
  const int32_t* last_page_tokens = nullptr;  // host [num_seqs]
};

// One CTA's work: pages [page_begin, page_end) of the view's page_ids, all of sequence seq; the last page of the
// range holds last_tokens valid tokens (page_tokens unless it is the sequence's last page).
struct CudaWorkItem {
  int32_t seq;
  int32_t page_begin;
  int32_t page_end;
  int32_t last_tokens;
};

class CudaDecodePlan {
 public:
  // views: the formats present in this step (each at most once; a view whose sequences are all empty may be
  // left out). sm_count: multiprocessors of the device (cudaDevAttrMultiProcessorCount). The split fills whole
  // waves of resident CTAs (queried from the current device: Create calls the CUDA runtime, no stream work); a small
  // view after a one-wave TQ3 view (the mix's FP8 pages at batch 1) is split to fit the slots the TQ3 CTAs leave
  // free, the TQ3 chunk made up to 10% longer where the wave would leave too few (session 17).
  static Status Create(const CudaDecodeShape& shape, const CudaViewLengths* views, int num_views, int sm_count,
                       CudaDecodePlan* out);

  size_t workspace_bytes() const { return workspace_bytes_; }
  // The workspace's first meta_bytes() hold the work lists that Upload writes; the partial states follow.
  size_t meta_bytes() const { return meta_bytes_; }
  // Copies the work lists into d_workspace (cudaMemcpyAsync from this object's host memory: keep the plan alive
  // and unchanged until the stream has passed the copy).
  Status Upload(void* d_workspace, cudaStream_t stream) const;

  const CudaDecodeShape& shape() const { return shape_; }
  // Query rows per sequence (num_q_heads * query_tokens): the partial states' and the merge's row count.
  int rows_per_seq() const { return shape_.num_q_heads * shape_.query_tokens; }
  int num_views() const { return num_views_; }
  KvFormat view_format(int v) const { return formats_[v]; }
  int view_items(int v) const { return item_count_[v]; }
  int total_items() const { return total_items_; }
  // CTAs per KV head of view v (its group split into CTAs of near-equal size): ceil(group / 16) for BF16 and for
  // FP8 / TQ3 at head_dim 64 / 128 (v17: two 8-head MMA tiles per CTA, one K / V read), else ceil(group / 8).
  // group here = query rows per KV head: num_q_heads / kv_heads * query_tokens (session 16).
  int head_ctas(int v) const { return head_ctas_[v]; }
  // Query rows per CTA of view v: ceil(group / head_ctas(v)) (the last CTA of a KV head may hold fewer).
  int cta_heads(int v) const { return cta_heads_[v]; }
  // Whether view v runs the wide TQ3 kernel (one CTA per SM; CudaTq3Ctas).
  bool wide_ctas(int v) const { return wide_[v]; }
  // Whether view v runs paired TQ3 CTAs (two KV heads per CTA; CudaTq3Ctas).
  bool paired_ctas(int v) const { return paired_[v]; }

 private:
  // The partial kernels of a step; *launched = whether any kernel was launched (cuda_attention.cu).
  friend Status CudaDecodePartialsLaunch(const CudaDecodePlan&, const PagedKvView*, int, const float*, void*,
                                         cudaStream_t, bool* launched);
  friend Status CudaDecodeMerge(const CudaDecodePlan&, void*, PartialStatesOut, cudaStream_t);
  // CudaDecodeMerge's launch; programmatic = a dependent launch inside CudaDecodeRun (cuda_attention.cu).
  friend Status CudaDecodeMergeLaunch(const CudaDecodePlan&, void*, PartialStatesOut, cudaStream_t, bool programmatic);
  CudaDecodeShape shape_;
  int num_views_ = 0;
  KvFormat formats_[kCudaMaxViews] = {};
  int page_tokens_[kCudaMaxViews] = {};
  int item_count_[kCudaMaxViews] = {};
  int item_offset_[kCudaMaxViews] = {};       // first global partial-state index of each view
  size_t items_offset_bytes_[kCudaMaxViews] = {};   // CudaWorkItem[item_count] in the workspace
  size_t indptr_offset_bytes_[kCudaMaxViews] = {};  // int32 [num_seqs + 1]: items of seq s per view
  size_t part_out_offset_bytes_ = 0;                // float [total_items][rows_per_seq][head_dim], virtual-head order
  size_t part_lse_offset_bytes_ = 0;                // float [total_items][rows_per_seq]
  size_t q_rows_offset_bytes_ = 0;                  // query_tokens > 1: float [num_seqs * rows_per_seq][head_dim],
                                                    //   the queries in virtual-head order
  size_t meta_bytes_ = 0;                           // the uploaded prefix
  int total_items_ = 0;
  int head_ctas_[kCudaMaxViews] = {};
  int cta_heads_[kCudaMaxViews] = {};
  bool wide_[kCudaMaxViews] = {};
  bool paired_[kCudaMaxViews] = {};
  size_t workspace_bytes_ = 0;
  std::vector<uint8_t> host_meta_;                  // what Upload copies
};

// Decode attention of query_tokens query tokens per sequence over all views; writes the merged state of every
// (query token, query head): out.out [num_seqs * query_tokens][num_q_heads][head_dim] (original domain),
// out.lse_log2 [num_seqs * query_tokens][num_q_heads] (-inf and zero output for a sequence with no cached token).
// views[v] must match the plan's view v (format, lengths); their pointers are device memory.
// d_q: [num_seqs * query_tokens][num_q_heads][head_dim] fp32, device.
Status CudaDecodeRun(const CudaDecodePlan& plan, const PagedKvView* views, int num_views, const float* d_q,
                     void* d_workspace, PartialStatesOut out, cudaStream_t stream);

// CudaDecodeRun = CudaDecodePartials, then CudaDecodeMerge (inside CudaDecodeRun the merge is a programmatic
// dependent launch: its CTAs start while the last partial kernel finishes).
// CudaDecodePartials: only the partial kernels; they leave every work item's partial state in d_workspace. For
// benchmarks (a step without its merge: what the merge adds to the step) and callers that merge further. With
// query_tokens > 1 a copy kernel that puts the queries into the workspace in virtual-head order runs first.
Status CudaDecodePartials(const CudaDecodePlan& plan, const PagedKvView* views, int num_views, const float* d_q,
                          void* d_workspace, cudaStream_t stream);
// CudaDecodeMerge: only the last kernel: merges the partial states already in d_workspace (left there by
// CudaDecodePartials or CudaDecodeRun with the same plan) into out, as an ordinary launch. With query_tokens > 1 the
// merge writes each row at its place in out's [token][head] order (session 17).
Status CudaDecodeMerge(const CudaDecodePlan& plan, void* d_workspace, PartialStatesOut out, cudaStream_t stream);

// Diagnostic timeline of a decode step (v19; build switch MINIMAKV_CUDA_TIMELINE=1, off by default: without it the
// kernels carry no probe and CudaTimelineCompiled() is false). With it, thread 0 of every CTA of the partial kernels
// and of the merge writes %globaltimer (ns, one clock for all SMs) at four points into a device table, slot
// kernel * kCudaTimelineMaxCtas + CTA (blockIdx.x + gridDim.x * blockIdx.y; CTAs past the cap are not recorded).
// Kernel index: int(KvFormat) of a partial kernel (0 BF16, 1 FP8, 2 TQ3), kCudaTimelineMerge for the merge.
inline constexpr int kCudaTimelineKernels = 4;
inline constexpr int kCudaTimelineMerge = 3;
inline constexpr int kCudaTimelineMaxCtas = 4096;
struct CudaCtaTimes {
  uint64_t start_ns;       // kernel entry
  uint64_t ready_ns;       // partial: query fragments built, first tiles in flight; merge: PDL wait done
  uint64_t first_warp_ns;  // partial: the first of the 4 warps left the key loop (unused by the merge)
  uint64_t loop_end_ns;    // partial: every warp left the key loop (barrier); merge: the row's items accumulated
  uint64_t exit_ns;        // partial: partial states written; merge: output written
  uint64_t ready_clk;      // partial: %clock64 of the CTA's SM at ready_ns (session 12: the loop's SM clock is
  uint64_t loop_end_clk;   //   (loop_end_clk - ready_clk) / (loop_end_ns - ready_ns); the card's power cap moves it)
  uint32_t sm;             // %smid
  uint32_t written;        // 1 once the CTA ran (the table is zeroed by CudaTimelineReset)
};
bool CudaTimelineCompiled();
// Zeroes the table (stream-ordered memset); call outside the timed region.
Status CudaTimelineReset(cudaStream_t stream);
// Copies the whole table (kCudaTimelineKernels * kCudaTimelineMaxCtas records) to the host (synchronous).
Status CudaTimelineRead(std::vector<CudaCtaTimes>* out);

}  // namespace minimakv
