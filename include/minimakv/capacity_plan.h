// Capacity planning: exact KV bytes per request and per live token for BF16, FP8 and the Minima-KV mix, and how
// many concurrent requests of a given context fit in a GPU memory budget.
//
// Byte models (all exact integers before conversion to KiB/GiB):
//   BF16:   2 bytes per value, no scales, no page slack (the paper's dense control).
//   FP8:    1 byte per value with one per-tensor scale (the paper's FP8 baseline; the scale is a few bytes per
//           layer and is not counted), no page slack.
//   Minima: OUR pages, sized by PageLayout (page_layout.h), so scales, alignment padding and the unfilled part
//           of the tail page are all counted. Per KV layer the first ceil(anchor_tokens / page_tokens) pages and
//           every page holding one of the last recent_tokens tokens stay FP8 (fp32 scale per (token, head)); the
//           partially filled tail page is FP8 too (appends write FP8); every other page is TQ3 (3d/8 + 2 bytes
//           per vector). Block-table metadata is counted too: one PageRef (block_table.h) per page per layer,
//           as KvAccounting counts it. PlanPolicy::bf16_layers full-attention layers hold BF16 pages instead
//           (PageLayout{kBf16}, every page, never converted), as InferenceSession stores a model's key-bias
//           outlier layers (CacheConfig::bf16_layers).
// Concurrency = floor((budget - weights) / (kv_bytes_per_request + fixed_state_per_request)), everything in GiB
// (2^30 bytes). With the paper's inputs this gives BF16/FP8 28/53 at 32K and 14/28 at 64K (tests check it).
#pragma once

#include <cstdint>

#include "minimakv/model_shape.h"
#include "minimakv/status.h"

namespace minimakv {

inline constexpr double kBytesPerKib = 1024.0;
inline constexpr double kBytesPerGib = 1024.0 * 1024.0 * 1024.0;

// The retention policy the plan assumes. Defaults are the recommended ones (docs/cli.md): 64-token pages (what
// engines use; the paper's 1,792-token logical pages waste up to a page of FP8 per layer), 256 anchor tokens
// (attention sinks + a typical system prompt), 1,024 recent tokens in FP8.
struct PlanPolicy {
  int page_tokens = 64;
  int64_t anchor_tokens = 256;
  int64_t recent_tokens = 1024;
  // Full-attention layers whose pages are all BF16 (a model's key-bias outlier layers, KeyBiasOutlierLayers in
  // llama_model.h: 4 of Qwen2.5-Coder-1.5B's 28; 0 for models without qkv biases). In [0, full-attention layers].
  int bf16_layers = 0;
};

struct CapacityInputs {
  int64_t context_tokens = 32768;
  double budget_gib = 86.4;                // memory the engine may use on the GPU
  double weights_gib = 25.15;              // model weights resident in that budget
  double state_gib_per_request = 0.153;    // fixed per-request state (linear-attention states, buffers)
};

// One storage scheme's footprint for one request.
struct FormatFootprint {
  int64_t kv_bytes_per_request = 0;
  double kib_per_token = 0.0;        // kv_bytes_per_request / context_tokens / 1024
  double bits_per_value = 0.0;       // kv bytes * 8 / (live tokens * K and V values of every KV layer)
  double compression_vs_bf16 = 0.0;  // BF16 bytes / these bytes
  double compression_vs_fp8 = 0.0;   // FP8 bytes / these bytes
  int64_t concurrency = 0;           // concurrent requests that fit (0 when the weights leave no room)
};

// How the Minima-KV bytes of one request split, per KV layer (full-attention layers; sliding layers follow the
// same rule over their window and are summed into the footprint only).
struct MinimaBreakdown {
  int64_t pages_per_layer = 0;
  int64_t fp8_pages_per_layer = 0;   // anchor pages + recent-window pages (+ partial tail page), no double count
  int64_t tq3_pages_per_layer = 0;
  int64_t fp8_page_bytes = 0;        // PageLayout{kFp8}.page_bytes()
  int64_t tq3_page_bytes = 0;        // PageLayout{kTq3}.page_bytes()
  int64_t bf16_page_bytes = 0;       // PageLayout{kBf16}.page_bytes(), the pages of PlanPolicy::bf16_layers
  int64_t slack_tokens_per_layer = 0;  // unfilled token slots of the tail page
  int64_t metadata_bytes_per_request = 0;  // block-table entries: pages * KV layers * sizeof(PageRef)
  double fp8_byte_fraction = 0.0;    // share of the request's KV bytes that sit in FP8 pages
  double bf16_byte_fraction = 0.0;   // share in the BF16 pages of PlanPolicy::bf16_layers
};

struct CapacityPlan {
  ModelShape shape;
  PlanPolicy policy;
  CapacityInputs inputs;
  int kv_layers = 0;  // full + sliding attention layers
  FormatFootprint bf16, fp8, minima;
  MinimaBreakdown minima_pages;
};

// InvalidArgument naming the bad value for non-positive context/page size, negative windows or GiB, bf16_layers
// outside [0, full-attention layers], or a shape whose head_dim the Minima codecs do not support (64/128/256).
// Also for a budget above 2^30 GiB, a context above 2^40 tokens, or one whose request would need more than 2^62
// bytes (BF16 or Minima pages): every byte count and concurrency of the plan is an exact int64.
Status PlanCapacity(const ModelShape& shape, const PlanPolicy& policy, const CapacityInputs& inputs,
                    CapacityPlan* plan);

// The paper's figures for Qwen3.6-27B on a 96 GB GPU (arXiv 2608.23834), printed next to ours for reference.
inline constexpr double kPaperBudgetGib = 86.4;
inline constexpr double kPaperWeightsGib = 25.15;
inline constexpr double kPaperStateGibPerRequest = 0.153;
inline constexpr double kPaperMinimaKibPerToken = 18.3;
inline constexpr double kPaperMinimaCompressionVsBf16 = 3.50;
inline constexpr double kPaperMinimaCompressionVsFp8 = 1.75;
struct PaperCapacityRow {
  int64_t context_tokens;
  int64_t bf16_concurrency, fp8_concurrency, minima_concurrency;
};
inline constexpr PaperCapacityRow kPaperQwenCapacity[] = {{32768, 28, 53, 84}, {65536, 14, 28, 47}};
// The paper row for `context_tokens`, or nullptr when the paper did not report that context.
const PaperCapacityRow* FindPaperCapacityRow(int64_t context_tokens);

}  // namespace minimakv
