// The CPU half of checking decode kernels on a real model's KV cache (a KvCapture, kv_capture.h): building the
// pages of one captured layer for a format mix, the CPU figures (direct kernels, fp64 references) and the
// comparison of another implementation's output (the CUDA decode: tests/kernels/cuda/real_kv_check.cu) against
// them. Everything here runs on the CPU, so tests/tools/real_kv_check_test.cpp covers it without a GPU.
//
// Sequences: one per query of the capture. Sequence i holds the first QueryContextTokens(i) tokens and is
// attended by query i, so a batch of num_queries sequences of slightly different lengths (and page splits)
// runs in one decode step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_capture.h"
#include "minimakv/kv_format.h"
#include "minimakv/page_layout.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/status.h"

namespace minimakv {

// Which pages are TQ3 (all others FP8). Pages are page_tokens consecutive tokens of a sequence of n tokens.
enum class RealKvMix {
  kMinima,  // the capture's retention policy, as PagedCache applies it: full pages holding no anchor token
            // (token < anchor_tokens) and no recent token (token >= n - recent_tokens) are TQ3
  kAllFp8,  // every page FP8
  kAllTq3,  // every page TQ3, the partly filled last page too (a pure TQ3 view; PagedCache never converts a
            // partial page, but the kernels' contract allows one as a sequence's last listed page)
};
inline constexpr RealKvMix kAllRealKvMixes[] = {RealKvMix::kMinima, RealKvMix::kAllFp8, RealKvMix::kAllTq3};
const char* RealKvMixName(RealKvMix mix);  // "minima", "fp8", "tq3"
// Parses "minima", "fp8", "tq3".
Status ParseRealKvMix(std::string_view name, RealKvMix* mix);

// Format of logical page `page` of a sequence of `seq_tokens` tokens under `mix` and the capture's policy.
KvFormat RealKvPageFormat(const KvCapture& capture, RealKvMix mix, int64_t seq_tokens, int64_t page);

// Host pages of one captured layer for one mix. Per format (index 0 FP8, 1 TQ3): a pool whose pages sit at
// shuffled physical ids (a seeded permutation of the pool's slots, so kernels are checked against page ids that
// are neither ordered nor contiguous), CSR page lists per sequence in logical order, and spare slots that no
// sequence lists, filled with 0xFF bytes (NaN FP8 codes, NaN scales) so that a kernel reading a wrong page
// produces NaN instead of a plausible number.
struct RealKvPool {
  // Movable, not copyable: a copy of `storage` could land at another alignment and shift base().
  RealKvPool() = default;
  RealKvPool(const RealKvPool&) = delete;
  RealKvPool& operator=(const RealKvPool&) = delete;
  RealKvPool(RealKvPool&&) = default;
  RealKvPool& operator=(RealKvPool&&) = default;

  PageLayout layout;
  int32_t capacity_pages = 0;
  std::vector<uint8_t> storage;           // capacity_pages * page_bytes + alignment slack; use base()
  std::vector<int32_t> page_indptr;       // [num_seqs + 1]
  std::vector<int32_t> page_ids;          // [page_indptr.back()]
  std::vector<int32_t> last_page_tokens;  // [num_seqs]; 0 for a sequence without pages of this format
  // The pool's first byte, 64-byte aligned like PagePool's (kernels may rely on it).
  uint8_t* base();
  const uint8_t* base() const;
  size_t pool_bytes() const { return size_t(capacity_pages) * layout.page_bytes(); }
  int32_t used_pages() const { return page_indptr.empty() ? 0 : page_indptr.back(); }
};
struct RealKvPages {
  static constexpr int kFp8 = 0, kTq3 = 1;
  RealKvMix mix = RealKvMix::kMinima;
  int num_seqs = 0;
  RealKvPool pools[2];
  // A host view of pool f (0 FP8, 1 TQ3); valid while this object lives unmoved.
  PagedKvView View(int f) const;
};

// Encodes the pages: FP8 by Fp8EncodeVector of each (token, head) K and V vector; TQ3 by Tq3EncodeVector of the
// FP8 decode of that vector (PagedCache's conversion, bit for bit). layer_slot indexes capture.layers.
// InvalidArgument for a bad slot or a capture ValidateKvCapture rejects; a vector the codecs refuse (a TQ3 norm
// past fp16) as the codec's error.
Status BuildRealKvPages(const KvCapture& capture, size_t layer_slot, RealKvMix mix, uint64_t shuffle_seed,
                        RealKvPages* out);

// The CPU figures of one (layer, mix).
struct RealKvCpuSide {
  std::vector<float> out;          // AttendMixedCpu over the pages: [num_queries][num_q_heads][head_dim]
  std::vector<float> lse_log2;     // [num_queries][num_q_heads]
  std::vector<double> pages_ref;   // fp64 ReferenceAttention over the same pages (decoded by the codecs)
  std::vector<double> dense_ref;   // fp64 attention on the capture's dense K/V (no quantization at all)
};
// The CPU direct kernels (CpuKernelFamily::kAuto, num_threads) and both fp64 references.
Status ComputeRealKvCpuSide(const KvCapture& capture, size_t layer_slot, const RealKvPages& pages,
                            const HadamardRotation& rotation, int num_threads, RealKvCpuSide* out);
// fp64 attention of every query on the capture's dense K/V over its context (QueryContextTokens).
//   out resized to [num_queries][num_q_heads][head_dim]
void DenseReferenceAttention(const KvCapture& capture, size_t layer_slot, std::vector<double>* out);

// One query of one (layer, mix): the checked output ("gpu", any implementation) against the CPU figures.
// rel_l2 = ||a - b|| / ||b|| over all heads of the query; cos_min = the smallest cosine over its heads.
struct RealKvRow {
  int layer = 0;
  RealKvMix mix = RealKvMix::kMinima;
  int query = 0;
  int64_t context_tokens = 0;
  int fp8_pages = 0, tq3_pages = 0;    // this sequence's pages per format
  double gpu_vs_cpu_rel_l2 = 0.0;      // the kernel check: required <= max_rel_l2
  double gpu_lse_max_abs_diff = 0.0;   // |lse_gpu - lse_cpu| (base 2), max over heads
  double gpu_vs_pages_rel_l2 = 0.0;    // against fp64 on the same pages: the kernel's own error
  double cpu_vs_pages_rel_l2 = 0.0;
  double gpu_vs_dense_rel_l2 = 0.0;    // against fp64 on the dense K/V: format + kernel error
  double cpu_vs_dense_rel_l2 = 0.0;
  double gpu_vs_dense_cos_min = 0.0;
  double cpu_vs_dense_cos_min = 0.0;
  // The same step run again without a new Upload (as a CUDA graph replays it): its output against the first
  // run's (relative L2, required <= max_rel_l2) and whether every bit is the same. 0 / true without a replay.
  double replay_rel_l2 = 0.0;
  bool replay_identical = true;
  std::string gpu_variant = "-";       // which GPU kernels ran (set by the caller), e.g. "auto:paired"
  bool pass = false;                   // every figure finite, gpu_vs_cpu and replay <= max_rel_l2, lse diff <= 1e-2
};
inline constexpr double kRealKvMaxRelL2 = 1e-3;
inline constexpr double kRealKvMaxLseDiff = 1e-2;  // a loose check on the merged LSE (base 2) the step returns

// Compares gpu_out [num_queries][num_q_heads][head_dim] and gpu_lse [num_queries][num_q_heads] with the CPU side,
// and replay_out (same shape; may be null) with gpu_out; appends one row per query to *rows. InvalidArgument for a
// null output or a bad slot.
Status CompareRealKv(const KvCapture& capture, size_t layer_slot, const RealKvPages& pages, const RealKvCpuSide& cpu,
                     const float* gpu_out, const float* gpu_lse, const float* replay_out, double max_rel_l2,
                     std::vector<RealKvRow>* rows);

// The worst of several rows of one (layer, mix) (a short table: one line per layer and mix): the largest error
// figures, the smallest cosines, pass only if all passed; query = -1, context and pages of the longest sequence.
// REQUIRES: rows not empty.
RealKvRow WorstRealKvRow(const std::vector<RealKvRow>& rows);

// A fixed-width text table (header line, one line per row) and one JSON object per row (one line, keys as the
// RealKvRow fields plus "mix" by name).
std::string RealKvTableHeader();
std::string RealKvTableRow(const RealKvRow& row);
std::string RealKvRowJson(const RealKvRow& row);

}  // namespace minimakv
