// RetentionPolicy: which pages stay in the hot format (FP8) and which are converted to TQ3. Data, not code
// paths (../shared/MINIMA-KV.md part 3). Tiers of a page of a sequence with n tokens (per layer):
//   recent  the page holds at least one of the last `recent_tokens` tokens (token t with t >= n - recent_tokens)
//   anchor  the page holds at least one of the first `anchor_tokens` tokens: the "attention sinks" / system
//           prompt every later token attends to (StreamingLLM, arXiv 2309.17453), or a token of a range
//           pinned with PagedCache::Pin (per sequence)
//   stale   everything else: converted FP8 -> TQ3 when it leaves the recent window (if convert_stale_to_tq3
//           and the cache has a TQ3 pool), else kept in the hot format.
// Recommended defaults (the paper's setting, used by `minimakv plan` unless told otherwise):
//   anchor_tokens = 256, recent_tokens = 1024.
// Only full pages are ever converted; the partly-filled last page of a sequence is always recent.
// Hot layers: layers whose pages never leave the hot format. For models whose keys in a few layers are dominated
// by a large per-layer component that 3-bit codes cannot carry next to the per-token part: Qwen2.5-Coder-1.5B's
// key biases reach 354 in layer 0 (key rms 77), 111, 43 and 46 in layers 1, 7 and 15 (3-7 elsewhere), and with
// those layers in TQ3 its passkey answers fail where FP8 answers them (KeyBiasOutlierLayers in llama_model.h picks
// them; docs/BENCHMARKS.md, section 5). Sessions go further and store those layers BF16 (CacheConfig::bf16_layers),
// since FP8 loses them too.
// The functions below are the policy's page arithmetic, shared by PagedCache (host pages) and by a GPU engine that
// keeps its pages in device pools (cuda_cache_ops.h: it appends, asks PagesToConvert which pages just went stale,
// and converts those with CudaConvertFp8ToTq3; also through the C ABI, c_api.h, and Python, docs/python.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "minimakv/status.h"
#include "minimakv/token_range.h"

namespace minimakv {

struct RetentionPolicy {
  int recent_tokens = 1024;          // R: >= 0
  int anchor_tokens = 256;           // A: >= 0, the first A tokens of every sequence
  bool convert_stale_to_tq3 = true;  // false: stale pages stay in the hot format (e.g. an FP8-only control)
  std::vector<int> hot_layers;       // layer indices in [0, num_layers) kept in the hot format; may repeat
};

inline constexpr int kRecommendedRecentTokens = 1024;
inline constexpr int kRecommendedAnchorTokens = 256;

// Pages [0, StalePageEnd) of a sequence with num_tokens tokens lie wholly before its recent window: page i when
// (i + 1) * page_tokens <= num_tokens - recent_tokens. Full pages only, so the partly filled last page is never
// among them. REQUIRES page_tokens >= 1 (PagesToConvert checks its arguments).
int64_t StalePageEnd(const RetentionPolicy& policy, int page_tokens, int64_t num_tokens);

// The anchor tier: page `page_index` holds one of the first anchor_tokens tokens or a token of a pinned range.
// REQUIRES page_tokens >= 1.
bool IsAnchorPage(const RetentionPolicy& policy, int page_tokens, int64_t page_index,
                  std::span<const TokenRange> pins = {});

// The pages (indices in the sequence, increasing) that go FP8 -> TQ3 when one layer of a sequence grows from
// old_tokens to new_tokens: those that left the recent window with this growth and are not anchors (pins
// included); none when !policy.convert_stale_to_tq3. old_tokens = 0 gives every stale page of a sequence of
// new_tokens tokens. What PagedCache::Append converts (hot layers aside: for a layer in policy.hot_layers nothing
// converts, and the caller knows its layer). InvalidArgument naming the value for page_tokens outside [1,
// kMaxPageTokens], negative token counts, new_tokens < old_tokens, negative windows, a null `pages`, or a growth
// whose list would exceed kMaxPagesToConvert pages (2^26 pages: 2^32 tokens of 64-token pages; `pages` unchanged).
inline constexpr int64_t kMaxPagesToConvert = int64_t(1) << 26;
Status PagesToConvert(const RetentionPolicy& policy, int page_tokens, int64_t old_tokens, int64_t new_tokens,
                      std::span<const TokenRange> pins, std::vector<int64_t>* pages);

}  // namespace minimakv
