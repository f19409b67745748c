// KvAccounting: exact bytes and tokens of a PagedCache, by format and by retention tier
// (../shared/MINIMA-KV.md part 7).
//
// Units. Token counts are "token-layers": one token of one layer stored in one page (a token of a sequence
// cached in all L layers counts L). Dividing by num_layers gives token positions; bytes_per_live_token is
// per token position over all layers, the paper's "KiB per live token".
// Sharing. A physical page shared by forked sequences counts ONCE, for bytes and for tokens (its valid
// tokens are the same for every owner: a shared page is never appended to; see PagedCache::Fork).
// logical_token_layers counts every owner's tokens, so logical / stored is the sharing factor.
//
// Bytes of a live page split exactly into:
//   code_bytes   codes of the valid tokens (K and V, every head)
//   scale_bytes  scales of the valid tokens (FP8: fp32, TQ3: fp16, BF16: none)
//   slack_bytes  unused tail slots of partly-filled pages + alignment padding (page_bytes - payload_bytes)
// so code_bytes + scale_bytes + slack_bytes == pages * page_bytes, per format and in total.
// metadata_bytes: block-table entries, sizeof(PageRef) each, summed over every (sequence, layer) table.
// total_bytes = page bytes of all formats + metadata_bytes.
//
// Tiers (retention_policy.h) partition the stored token-layers:
//   recent + anchor + stale_kept_hot == tokens in the hot format (FP8, or BF16 for a control cache),
//   stale_tq3 == tokens in TQ3 pages.
// A hot page shared by owners that see it in different tiers takes the hottest (recent > anchor > stale).
// A TQ3 page is always stale_tq3, even if a pin covers it later (TQ3 is lossy: it cannot go back to FP8).
// stale_kept_hot: stale pages still in the hot format because the TQ3 pool was full, conversion is
// disabled (policy, a hot layer, or a BF16 control cache), or the vector's norm overflows the TQ3 fp16 scale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "minimakv/kv_format.h"

namespace minimakv {

struct FormatAccounting {
  int32_t capacity_pages = 0;  // 0: the cache has no pool of this format
  int32_t live_pages = 0;      // distinct physical pages in use
  int64_t token_layers = 0;    // valid tokens in those pages
  size_t page_bytes = 0;       // bytes of one page (PageLayout::page_bytes)
  size_t live_bytes = 0;       // live_pages * page_bytes
  size_t code_bytes = 0;
  size_t scale_bytes = 0;
  size_t slack_bytes = 0;

  friend bool operator==(const FormatAccounting&, const FormatAccounting&) = default;
};

struct KvAccounting {
  int num_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int64_t num_sequences = 0;

  FormatAccounting formats[kNumKvFormats];  // indexed by KvFormat

  // Tiers, in token-layers (see above).
  int64_t recent_token_layers = 0;
  int64_t anchor_token_layers = 0;          // first anchor_tokens tokens and pinned ranges
  int64_t stale_tq3_token_layers = 0;
  int64_t stale_kept_hot_token_layers = 0;  // "stale kept FP8" in an FP8/TQ3 cache

  int64_t stored_token_layers = 0;   // distinct: sum of formats[f].token_layers
  int64_t logical_token_layers = 0;  // every sequence's tokens, shared pages counted per owner

  size_t code_bytes = 0;      // all formats
  size_t scale_bytes = 0;
  size_t slack_bytes = 0;
  size_t metadata_bytes = 0;
  size_t total_bytes = 0;     // page bytes + metadata_bytes

  // total_bytes / (stored_token_layers / num_layers); 0 when nothing is stored.
  double bytes_per_live_token = 0.0;
  // Dense cache of the same stored tokens, no scales, no pages: BF16 2 bytes per value, FP8 1 byte per
  // value (2 * kv_heads * head_dim values per token-layer: K and V). Ratio = dense bytes / total_bytes;
  // 0 when nothing is stored.
  double compression_vs_bf16 = 0.0;
  double compression_vs_fp8 = 0.0;

  // Multi-line human-readable summary (KiB per live token, formats, tiers, compression).
  std::string ToString() const;

  friend bool operator==(const KvAccounting&, const KvAccounting&) = default;
};

}  // namespace minimakv
