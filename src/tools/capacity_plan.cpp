#include "minimakv/capacity_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "minimakv/block_table.h"
#include "minimakv/kv_format.h"
#include "minimakv/page_layout.h"

namespace minimakv {

namespace {

constexpr int64_t kKvTensorsPerLayer = 2;  // K and V
constexpr int64_t kBf16BytesPerValue = 2;
constexpr int64_t kFp8BytesPerValue = 1;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
// A GiB figure for a message: %g, so that 1e30 reads as 1e+30 rather than 31 digits.
std::string GibText(double gib) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", gib);
  return text;
}
// Contexts up to 2^40 tokens; and no request may need more than 2^62 bytes, so every int64 byte count stays exact.
constexpr int64_t kMaxContextTokens = int64_t(1) << 40;
constexpr double kMaxRequestBytes = 4611686018427387904.0;  // 2^62
// A request holds at least 128 bytes (one FP8 token of one 64-dim head), so 2^30 GiB hold fewer than 2^53 of them.
constexpr double kMaxBudgetGib = 1073741824.0;  // 2^30

// Pages of one layer holding `tokens` tokens under the policy, and how many of them stay FP8.
struct LayerPages {
  int64_t pages = 0;
  int64_t fp8_pages = 0;
};

LayerPages SplitLayerPages(int64_t tokens, const PlanPolicy& policy) {
  LayerPages out;
  if (tokens <= 0) return out;
  const int64_t p = policy.page_tokens;
  out.pages = CeilDiv(tokens, p);
  // Anchors past the end cover every page (and a huge anchor count would overflow the ceiling division).
  const int64_t anchor_tokens = std::min(policy.anchor_tokens, tokens);
  // Anchor pages: [0, anchor_end). Recent pages: [recent_begin, pages), i.e. every page holding one of the last
  // recent_tokens tokens. The partly filled tail page (new tokens are appended in FP8) is always among them: with
  // recent_tokens = 0, first_recent_token = tokens and tokens / p is the tail page exactly when it is partial.
  const int64_t anchor_end = std::min(out.pages, CeilDiv(anchor_tokens, p));
  const int64_t first_recent_token = std::max<int64_t>(0, tokens - policy.recent_tokens);
  int64_t recent_begin = first_recent_token / p;
  recent_begin = std::max(recent_begin, anchor_end);  // overlapping pages are counted once
  out.fp8_pages = anchor_end + (out.pages - recent_begin);
  return out;
}

}  // namespace

const PaperCapacityRow* FindPaperCapacityRow(int64_t context_tokens) {
  for (const PaperCapacityRow& row : kPaperQwenCapacity) {
    if (row.context_tokens == context_tokens) return &row;
  }
  return nullptr;
}

Status PlanCapacity(const ModelShape& shape, const PlanPolicy& policy, const CapacityInputs& inputs,
                    CapacityPlan* plan) {
  MINIMAKV_RETURN_IF_ERROR(CheckModelShape(shape));
  if (inputs.context_tokens < 1 || inputs.context_tokens > kMaxContextTokens) {
    return Status::InvalidArgument("context " + std::to_string(inputs.context_tokens) +
                                   " must be positive and at most 2^40 tokens");
  }
  if (policy.anchor_tokens < 0) {
    return Status::InvalidArgument("anchor tokens " + std::to_string(policy.anchor_tokens) + " must be >= 0");
  }
  if (policy.recent_tokens < 0) {
    return Status::InvalidArgument("recent tokens " + std::to_string(policy.recent_tokens) + " must be >= 0");
  }
  if (!(inputs.budget_gib > 0) || !std::isfinite(inputs.budget_gib)) {
    return Status::InvalidArgument("budget " + GibText(inputs.budget_gib) + " GiB must be positive");
  }
  if (inputs.budget_gib > kMaxBudgetGib) {  // keeps every concurrency inside int64
    return Status::InvalidArgument("budget " + GibText(inputs.budget_gib) + " GiB exceeds 2^30 GiB");
  }
  if (!(inputs.weights_gib >= 0) || !std::isfinite(inputs.weights_gib)) {
    return Status::InvalidArgument("weights " + GibText(inputs.weights_gib) + " GiB must be >= 0");
  }
  if (!(inputs.state_gib_per_request >= 0) || !std::isfinite(inputs.state_gib_per_request)) {
    return Status::InvalidArgument("fixed state " + GibText(inputs.state_gib_per_request) +
                                   " GiB per request must be >= 0");
  }
  if (policy.bf16_layers < 0 || policy.bf16_layers > shape.full_attention_layers) {
    return Status::InvalidArgument("bf16 layers " + std::to_string(policy.bf16_layers) + " must be in [0, " +
                                   std::to_string(shape.full_attention_layers) + "] (the full-attention layers)");
  }
  const PageLayout fp8_layout{KvFormat::kFp8, shape.kv_heads, shape.head_dim, policy.page_tokens};
  const PageLayout tq3_layout{KvFormat::kTq3, shape.kv_heads, shape.head_dim, policy.page_tokens};
  const PageLayout bf16_layout{KvFormat::kBf16, shape.kv_heads, shape.head_dim, policy.page_tokens};
  Status layout_status = CheckPageLayout(fp8_layout);
  if (!layout_status.ok()) return Status::InvalidArgument("Minima-KV pages: " + layout_status.message());

  // Checked in floating point before any int64 product: the BF16 bytes, or the Minima pages (a page of slack per
  // layer, which a short context with large pages can make the larger of the two), as if all were FP8 (BF16 with
  // bf16_layers).
  const double kv_layers = double(shape.full_attention_layers) + double(shape.sliding_attention_layers);
  const double bf16_bound = double(inputs.context_tokens) * kv_layers * double(kKvTensorsPerLayer) *
                            double(shape.kv_heads) * double(shape.head_dim) * double(kBf16BytesPerValue);
  const double page_bound = double(CeilDiv(inputs.context_tokens, policy.page_tokens)) * kv_layers *
                            (double(policy.bf16_layers > 0 ? bf16_layout.page_bytes() : fp8_layout.page_bytes()) +
                             double(sizeof(PageRef)));
  if (bf16_bound > kMaxRequestBytes || page_bound > kMaxRequestBytes) {
    return Status::InvalidArgument("context " + std::to_string(inputs.context_tokens) + " over " +
                                   std::to_string(int64_t(kv_layers)) + " KV layers of " +
                                   std::to_string(shape.kv_heads) + " x " + std::to_string(shape.head_dim) +
                                   " with " + std::to_string(policy.page_tokens) +
                                   "-token pages needs more than 2^62 bytes per request");
  }
  CapacityPlan p;
  p.shape = shape;
  p.policy = policy;
  p.inputs = inputs;
  p.kv_layers = shape.full_attention_layers + shape.sliding_attention_layers;

  // Token-layers of KV one request keeps: full layers hold the whole context, sliding layers their window.
  const int64_t context = inputs.context_tokens;
  const int64_t sliding_tokens = shape.sliding_attention_layers > 0 ? shape.sliding_tokens(context) : 0;
  const int64_t token_layers = context * shape.full_attention_layers + sliding_tokens * shape.sliding_attention_layers;
  const int64_t values_per_token_layer = kKvTensorsPerLayer * shape.kv_heads * shape.head_dim;

  p.bf16.kv_bytes_per_request = token_layers * values_per_token_layer * kBf16BytesPerValue;
  p.fp8.kv_bytes_per_request = token_layers * values_per_token_layer * kFp8BytesPerValue;

  const LayerPages full = SplitLayerPages(context, policy);
  const LayerPages sliding = SplitLayerPages(sliding_tokens, policy);
  const int64_t fp8_page_bytes = int64_t(fp8_layout.page_bytes());
  const int64_t tq3_page_bytes = int64_t(tq3_layout.page_bytes());
  const int64_t bf16_page_bytes = int64_t(bf16_layout.page_bytes());
  const int64_t mixed_full_layers = shape.full_attention_layers - policy.bf16_layers;  // FP8 + TQ3 pages
  const int64_t fp8_bytes = (full.fp8_pages * mixed_full_layers +
                             sliding.fp8_pages * shape.sliding_attention_layers) * fp8_page_bytes;
  const int64_t tq3_bytes = ((full.pages - full.fp8_pages) * mixed_full_layers +
                             (sliding.pages - sliding.fp8_pages) * shape.sliding_attention_layers) * tq3_page_bytes;
  const int64_t bf16_bytes = full.pages * policy.bf16_layers * bf16_page_bytes;
  const int64_t metadata_bytes =
      (full.pages * shape.full_attention_layers + sliding.pages * shape.sliding_attention_layers) *
      int64_t(sizeof(PageRef));
  p.minima.kv_bytes_per_request = fp8_bytes + tq3_bytes + bf16_bytes + metadata_bytes;
  p.minima_pages = MinimaBreakdown{
      .pages_per_layer = full.pages,
      .fp8_pages_per_layer = full.fp8_pages,
      .tq3_pages_per_layer = full.pages - full.fp8_pages,
      .fp8_page_bytes = fp8_page_bytes,
      .tq3_page_bytes = tq3_page_bytes,
      .bf16_page_bytes = bf16_page_bytes,
      .slack_tokens_per_layer = full.pages * policy.page_tokens - context,
      .metadata_bytes_per_request = metadata_bytes,
      .fp8_byte_fraction = double(fp8_bytes) / double(p.minima.kv_bytes_per_request),
      .bf16_byte_fraction = double(bf16_bytes) / double(p.minima.kv_bytes_per_request),
  };

  const double available_gib = inputs.budget_gib - inputs.weights_gib;
  const double bf16_baseline_bytes = double(p.bf16.kv_bytes_per_request);
  const double fp8_baseline_bytes = double(p.fp8.kv_bytes_per_request);
  for (FormatFootprint* f : {&p.bf16, &p.fp8, &p.minima}) {
    const double bytes = double(f->kv_bytes_per_request);
    f->kib_per_token = bytes / double(context) / kBytesPerKib;
    f->bits_per_value = bytes * 8.0 / double(token_layers * values_per_token_layer);
    f->compression_vs_bf16 = bf16_baseline_bytes / bytes;
    f->compression_vs_fp8 = fp8_baseline_bytes / bytes;
    const double gib_per_request = bytes / kBytesPerGib + inputs.state_gib_per_request;
    f->concurrency = available_gib > 0 ? int64_t(std::floor(available_gib / gib_per_request)) : 0;
  }
  *plan = std::move(p);
  return Status::Ok();
}

}  // namespace minimakv
