// Synthetic paged KV for tests, benchmarks and the fidelity tool: encodes given K/V into a pool of pages of
// one format (the codecs + PageLayout, the bytes a PagedCache would hold) and exposes the PagedKvView kernels
// read. Independent of the cache classes on purpose, so kernels can be tested on exactly chosen pages.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "minimakv/hadamard_rotation.h"
#include "minimakv/page_layout.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/status.h"
#include "minimakv/token_range.h"

namespace minimakv {

// Writes token `token` of sequence `seq`: k and v are [kv_heads][head_dim] each.
using KvSource = std::function<void(int seq, int64_t token, float* k, float* v)>;

struct SyntheticPool {
  PageLayout layout;
  std::unique_ptr<uint8_t, decltype(&std::free)> pages{nullptr, &std::free};  // kPageAlignBytes-aligned
  size_t num_pages = 0;
  std::vector<int32_t> page_indptr;       // [num_seqs + 1]
  std::vector<int32_t> page_ids;          // listed pages, in token order per sequence
  std::vector<int32_t> last_page_tokens;  // [num_seqs]
  std::vector<int64_t> seq_tokens;        // [num_seqs] tokens stored per sequence

  int num_seqs() const { return int(last_page_tokens.size()); }
  size_t pool_bytes() const { return num_pages * layout.page_bytes(); }
  PagedKvView View() const;
};

// Encodes, for each sequence s, the tokens of ranges[s] (in order) into pages of `layout.format`.
// Every range but the last of a sequence must hold a multiple of layout.page_tokens tokens (only the last
// listed page may be partly filled). Physical page ids are a permutation of 0..num_pages-1: ascending when
// page_order_seed is 0, else shuffled with that seed. rotation is required for TQ3.
// InvalidArgument for a bad layout, range, non-finite source value or more than INT32_MAX pages in all;
// ResourceExhausted when the pool's memory cannot be allocated.
Status BuildSyntheticPool(const PageLayout& layout, const HadamardRotation* rotation,
                          const std::vector<std::vector<TokenRange>>& ranges, const KvSource& source,
                          uint64_t page_order_seed, SyntheticPool* pool);

// The Minima-KV tiers of a `context`-token sequence: FP8 anchors [0, A) with A = anchor_tokens rounded up to
// whole pages, FP8 recent tail [R0, context) with R0 the page boundary at or below context - recent_tokens
// (never below A), TQ3 for the pages in between. Either list may come back empty.
void SplitMinimaTiers(int64_t context, int page_tokens, int anchor_tokens, int recent_tokens,
                      std::vector<TokenRange>* fp8_ranges, std::vector<TokenRange>* tq3_ranges);

// A small, fast generator of normal samples for synthetic data (xorshift64* + Box-Muller), reproducible from
// a seed on every platform (std::normal_distribution is not).
class GaussianSource {
 public:
  explicit GaussianSource(uint64_t seed);
  float Next();
  void Fill(float* x, size_t n);

 private:
  uint64_t NextBits();
  uint64_t state_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

}  // namespace minimakv
