#include "minimakv/capacity_plan.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "minimakv/block_table.h"
#include "minimakv/model_shape.h"
#include "minimakv/retention_policy.h"
#include "tools/plan_report.h"

namespace minimakv {
namespace {

CapacityPlan PlanQwen(int64_t context_tokens, PlanPolicy policy = {}) {
  ModelShape shape;
  EXPECT_TRUE(ModelShapeFromPreset("qwen3.6-27b", &shape).ok());
  CapacityInputs inputs{.context_tokens = context_tokens,
                        .budget_gib = kPaperBudgetGib,
                        .weights_gib = kPaperWeightsGib,
                        .state_gib_per_request = kPaperStateGibPerRequest};
  CapacityPlan plan;
  const Status s = PlanCapacity(shape, policy, inputs, &plan);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return plan;
}

TEST(ModelShapePresets, QwenAndLlamaMatchTheSpec) {
  ModelShape q;
  ASSERT_TRUE(ModelShapeFromPreset("qwen3.6-27b", &q).ok());
  EXPECT_EQ(q.num_layers, 64);
  EXPECT_EQ(q.full_attention_layers, 16);
  EXPECT_EQ(q.linear_attention_layers(), 48);
  EXPECT_EQ(q.q_heads, 24);
  EXPECT_EQ(q.kv_heads, 4);
  EXPECT_EQ(q.head_dim, 256);
  ModelShape l;
  ASSERT_TRUE(ModelShapeFromPreset("llama-3.1-8b", &l).ok());
  EXPECT_EQ(l.num_layers, 32);
  EXPECT_EQ(l.full_attention_layers, 32);
  EXPECT_EQ(l.q_heads, 32);
  EXPECT_EQ(l.kv_heads, 8);
  EXPECT_EQ(l.head_dim, 128);
  const Status s = ModelShapeFromPreset("gpt-5", &l);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("gpt-5"), std::string::npos);
}

// The paper's capacity model (arXiv 2608.23834): BF16 64 KiB/token, FP8 32 KiB/token, and concurrency
// 28 / 53 at 32K, 14 / 28 at 64K with 86.4 GiB budget, 25.15 GiB weights, 0.153 GiB state per request.
TEST(CapacityPlan, ReproducesThePapersBf16AndFp8Concurrency) {
  const CapacityPlan p32 = PlanQwen(32768);
  EXPECT_EQ(p32.bf16.kv_bytes_per_request, int64_t(32768) * 65536);
  EXPECT_EQ(p32.fp8.kv_bytes_per_request, int64_t(32768) * 32768);
  EXPECT_DOUBLE_EQ(p32.bf16.kib_per_token, 64.0);
  EXPECT_DOUBLE_EQ(p32.fp8.kib_per_token, 32.0);
  EXPECT_DOUBLE_EQ(p32.bf16.bits_per_value, 16.0);
  EXPECT_DOUBLE_EQ(p32.fp8.bits_per_value, 8.0);
  EXPECT_DOUBLE_EQ(p32.fp8.compression_vs_bf16, 2.0);
  EXPECT_EQ(p32.bf16.concurrency, 28);
  EXPECT_EQ(p32.fp8.concurrency, 53);
  const CapacityPlan p64 = PlanQwen(65536);
  EXPECT_EQ(p64.bf16.concurrency, 14);
  EXPECT_EQ(p64.fp8.concurrency, 28);
  for (int64_t context : {int64_t(32768), int64_t(65536)}) {
    const PaperCapacityRow* row = FindPaperCapacityRow(context);
    ASSERT_NE(row, nullptr);
    const CapacityPlan p = PlanQwen(context);
    EXPECT_EQ(p.bf16.concurrency, row->bf16_concurrency);
    EXPECT_EQ(p.fp8.concurrency, row->fp8_concurrency);
  }
  EXPECT_EQ(FindPaperCapacityRow(16384), nullptr);
}

// Our pages, default policy (64-token pages, 256 anchors, 1024 recent), Qwen3.6 at 32K:
// 512 pages per layer; FP8 = 4 anchor pages + 16 recent pages; TQ3 = 492.
// FP8 page = 2 (K,V) * 4 heads * 64 tokens * (256 codes + 4 scale bytes) = 133,120 B (already 64-aligned).
// TQ3 page = 2 * 4 * 64 * (96 codes + 2 scale bytes) = 50,176 B.
// Pages = 16 layers * (20 * 133120 + 492 * 50176) = 437,583,872 B; block table = 16 * 512 * sizeof(PageRef)
// = 16 * 512 * 8 = 65,536 B. Request = 437,649,408 B = 13.04296875 KiB per token.
TEST(CapacityPlan, MinimaBytesAreExactAtPaperContexts) {
  const CapacityPlan p = PlanQwen(32768);
  EXPECT_EQ(p.minima_pages.pages_per_layer, 512);
  EXPECT_EQ(p.minima_pages.fp8_pages_per_layer, 20);
  EXPECT_EQ(p.minima_pages.tq3_pages_per_layer, 492);
  EXPECT_EQ(p.minima_pages.fp8_page_bytes, 133120);
  EXPECT_EQ(p.minima_pages.tq3_page_bytes, 50176);
  EXPECT_EQ(p.minima_pages.slack_tokens_per_layer, 0);
  static_assert(sizeof(PageRef) == 8);
  EXPECT_EQ(p.minima_pages.metadata_bytes_per_request, 65536);
  EXPECT_EQ(p.minima.kv_bytes_per_request, 437649408);
  EXPECT_DOUBLE_EQ(p.minima.kib_per_token, 13.04296875);
  EXPECT_DOUBLE_EQ(p.minima.compression_vs_bf16, 2147483648.0 / 437649408.0);
  EXPECT_DOUBLE_EQ(p.minima.compression_vs_fp8, 1073741824.0 / 437649408.0);
  EXPECT_DOUBLE_EQ(p.minima_pages.fp8_byte_fraction, 16.0 * 20 * 133120 / 437649408.0);
  // floor(61.25 / (437649408 / 2^30 + 0.153)) = floor(109.3) = 109
  EXPECT_EQ(p.minima.concurrency, 109);

  // 64K: 1024 pages, 20 FP8, 1004 TQ3 -> 16 * (20 * 133120 + 1004 * 50176) + 16 * 1024 * 8 = 848,756,736 B.
  const CapacityPlan q = PlanQwen(65536);
  EXPECT_EQ(q.minima.kv_bytes_per_request, 848756736);
  EXPECT_DOUBLE_EQ(q.minima.kib_per_token, 12.6474609375);
  EXPECT_EQ(q.minima.concurrency, 64);
  // Ours must beat the paper's Minima figures (18.3 KiB/token, 84 and 47 requests).
  EXPECT_LT(p.minima.kib_per_token, kPaperMinimaKibPerToken);
  EXPECT_GT(p.minima.concurrency, FindPaperCapacityRow(32768)->minima_concurrency);
  EXPECT_GT(q.minima.concurrency, FindPaperCapacityRow(65536)->minima_concurrency);
}

TEST(CapacityPlan, PartialTailPageAndOverlapsAreCountedOnce) {
  // 33,000 tokens: 516 pages, the last holds 40 tokens (24 slack slots). Recent window starts at token 31,976,
  // i.e. page 499, so pages 499..515 (17) + 4 anchors = 21 FP8 pages.
  const CapacityPlan p = PlanQwen(33000);
  EXPECT_EQ(p.minima_pages.pages_per_layer, 516);
  EXPECT_EQ(p.minima_pages.fp8_pages_per_layer, 21);
  EXPECT_EQ(p.minima_pages.slack_tokens_per_layer, 24);
  EXPECT_EQ(p.minima.kv_bytes_per_request, 16 * (21 * int64_t(133120) + 495 * int64_t(50176) + 516 * 8));
  EXPECT_EQ(p.minima.concurrency, 108);

  // 1,000 tokens: 16 pages, all inside anchors + recent window: every page FP8, none counted twice.
  const CapacityPlan small = PlanQwen(1000);
  EXPECT_EQ(small.minima_pages.pages_per_layer, 16);
  EXPECT_EQ(small.minima_pages.fp8_pages_per_layer, 16);
  EXPECT_EQ(small.minima_pages.tq3_pages_per_layer, 0);
  EXPECT_EQ(small.minima.kv_bytes_per_request, 16 * 16 * (int64_t(133120) + 8));

  // No anchors, no recent window, page-aligned context: everything TQ3.
  const CapacityPlan all_tq3 = PlanQwen(4096, PlanPolicy{.page_tokens = 64, .anchor_tokens = 0, .recent_tokens = 0});
  EXPECT_EQ(all_tq3.minima_pages.fp8_pages_per_layer, 0);
  EXPECT_EQ(all_tq3.minima.kv_bytes_per_request, 16 * 64 * (int64_t(50176) + 8));
  // Same but one token past a page boundary: the partial tail page stays FP8 (appends write FP8).
  const CapacityPlan tail = PlanQwen(4097, PlanPolicy{.page_tokens = 64, .anchor_tokens = 0, .recent_tokens = 0});
  EXPECT_EQ(tail.minima_pages.fp8_pages_per_layer, 1);
  EXPECT_EQ(tail.minima_pages.tq3_pages_per_layer, 64);
}

// The plan's closed-form split of a request's pages is the policy the cache and GPU engines convert by
// (retention_policy.h PagesToConvert): its TQ3 pages are exactly the pages PagesToConvert lists for the context.
TEST(CapacityPlan, TheMinimaSplitIsWhatPagesToConvertLists) {
  int cases = 0;
  for (int page_tokens : {16, 64}) {
    for (int anchor : {0, 100, 256}) {
      for (int recent : {0, 100, 1024}) {
        for (int64_t context = 1; context <= 5000; context += 97) {
          const CapacityPlan plan = PlanQwen(
              context, PlanPolicy{.page_tokens = page_tokens, .anchor_tokens = anchor, .recent_tokens = recent});
          RetentionPolicy policy;
          policy.anchor_tokens = anchor;
          policy.recent_tokens = recent;
          std::vector<int64_t> pages;
          ASSERT_TRUE(PagesToConvert(policy, page_tokens, 0, context, {}, &pages).ok());
          ASSERT_EQ(plan.minima_pages.tq3_pages_per_layer, int64_t(pages.size()))
              << "context " << context << " page_tokens " << page_tokens << " anchor " << anchor << " recent "
              << recent;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * 3 * 3 * 52);
}

TEST(CapacityPlan, LlamaPagesUseItsHeadDim) {
  ModelShape shape;
  ASSERT_TRUE(ModelShapeFromPreset("llama-3.1-8b", &shape).ok());
  CapacityPlan p;
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = 32768}, &p).ok());
  // BF16: 32 layers * 2 * 8 heads * 128 * 2 B = 128 KiB per token.
  EXPECT_DOUBLE_EQ(p.bf16.kib_per_token, 128.0);
  // FP8 page 2*8*64*(128+4) = 135,168 B; TQ3 page 2*8*64*(48+2) = 51,200 B.
  EXPECT_EQ(p.minima_pages.fp8_page_bytes, 135168);
  EXPECT_EQ(p.minima_pages.tq3_page_bytes, 51200);
  EXPECT_EQ(p.minima.kv_bytes_per_request, 32 * (20 * int64_t(135168) + 492 * int64_t(51200) + 512 * 8));
  EXPECT_DOUBLE_EQ(p.minima.kib_per_token, 26.6015625 + 32.0 * 512 * 8 / 32768 / 1024);
}

// BF16 layers (a model's key-bias outlier layers): every page of those layers in BF16, the rest as before.
TEST(CapacityPlan, Bf16LayersHoldBf16PagesThroughout) {
  ModelShape shape;
  ASSERT_TRUE(ModelShapeFromPreset("llama-3.1-8b", &shape).ok());
  CapacityPlan p;
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{.bf16_layers = 4}, CapacityInputs{.context_tokens = 32768}, &p).ok());
  // BF16 page 2*8*64*128*2 = 262,144 B.
  EXPECT_EQ(p.minima_pages.bf16_page_bytes, 262144);
  const int64_t bf16_bytes = 4 * 512 * int64_t(262144);
  const int64_t expected = 28 * (20 * int64_t(135168) + 492 * int64_t(51200)) + bf16_bytes + 32 * 512 * 8;
  EXPECT_EQ(p.minima.kv_bytes_per_request, expected);
  EXPECT_DOUBLE_EQ(p.minima_pages.bf16_byte_fraction, double(bf16_bytes) / double(expected));
  EXPECT_DOUBLE_EQ(p.minima_pages.fp8_byte_fraction, 28.0 * 20 * 135168 / double(expected));
  // Every layer BF16: the BF16 control plus the block tables.
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{.bf16_layers = 32}, CapacityInputs{.context_tokens = 32768}, &p).ok());
  EXPECT_EQ(p.minima.kv_bytes_per_request, p.bf16.kv_bytes_per_request + 32 * 512 * 8);
  for (int bad : {-1, 33}) {
    const Status s = PlanCapacity(shape, PlanPolicy{.bf16_layers = bad}, CapacityInputs{}, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("bf16 layers " + std::to_string(bad) + " must be in [0, 32]"), std::string::npos)
        << s.message();
  }
}

TEST(CapacityPlan, SlidingLayersHoldOnlyTheirWindow) {
  ModelShape s{.name = "toy", .num_layers = 4, .full_attention_layers = 1, .sliding_attention_layers = 3,
               .sliding_window_tokens = 1024, .q_heads = 8, .kv_heads = 2, .head_dim = 128};
  CapacityPlan p;
  ASSERT_TRUE(PlanCapacity(s, PlanPolicy{}, CapacityInputs{.context_tokens = 8192}, &p).ok());
  // (8192 * 1 + 1024 * 3) token-layers * 2 * 2 heads * 128 * 2 B.
  EXPECT_EQ(p.bf16.kv_bytes_per_request, (8192 + 3 * 1024) * int64_t(2 * 2 * 128 * 2));
  // Sliding layers: 16 pages, all in the recent window -> FP8. Full layer: 128 pages, 4 + 16 FP8.
  const int64_t fp8_page = 2 * 2 * 64 * (128 + 4), tq3_page = 2 * 2 * 64 * (48 + 2);
  EXPECT_EQ(p.minima.kv_bytes_per_request, (20 + 3 * 16) * fp8_page + 108 * tq3_page + (128 + 3 * 16) * 8);
}

TEST(CapacityPlan, BadInputsNameTheValue) {
  ModelShape shape;
  ASSERT_TRUE(ModelShapeFromPreset("qwen3.6-27b", &shape).ok());
  CapacityPlan p;
  Status s = PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = 0}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("context 0"), std::string::npos) << s.message();
  s = PlanCapacity(shape, PlanPolicy{.page_tokens = 0}, CapacityInputs{}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("page_tokens"), std::string::npos) << s.message();
  s = PlanCapacity(shape, PlanPolicy{.recent_tokens = -1}, CapacityInputs{}, &p);
  EXPECT_NE(s.message().find("recent tokens -1"), std::string::npos) << s.message();
  s = PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.budget_gib = -1.0}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  ModelShape odd = shape;
  odd.head_dim = 96;  // not a power of two: no Hadamard rotation, no Minima pages
  s = PlanCapacity(odd, PlanPolicy{}, CapacityInputs{}, &p);
  EXPECT_NE(s.message().find("head_dim 96"), std::string::npos) << s.message();
  // A budget past 2^30 GiB (was: concurrency -9223372036854775808, a double beyond int64 converted).
  s = PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = 1, .budget_gib = 1e30}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("exceeds 2^30 GiB"), std::string::npos) << s.message();
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = 1, .budget_gib = 1073741824.0,
                                                                .weights_gib = 0, .state_gib_per_request = 0},
                           &p).ok());
  EXPECT_GT(p.fp8.concurrency, 0);
  // Weights larger than the budget: valid question, zero requests fit.
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.budget_gib = 10, .weights_gib = 20}, &p).ok());
  EXPECT_EQ(p.bf16.concurrency, 0);
  EXPECT_EQ(p.minima.concurrency, 0);
}

// Contexts and windows near int64's limits: a clear error (or, for anchors past the end, every page FP8) instead of
// int64 overflow in the byte counts (was: `minimakv plan --context 9223372036854775807` printed garbage, and
// UBSan stopped it at the token-layer product).
TEST(CapacityPlan, HugeContextsAreRefusedInsteadOfOverflowing) {
  ModelShape shape;
  ASSERT_TRUE(ModelShapeFromPreset("qwen3.6-27b", &shape).ok());
  CapacityPlan p;
  for (int64_t context : {std::numeric_limits<int64_t>::max(), int64_t(1) << 41, (int64_t(1) << 40) + 1}) {
    const Status s = PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = context}, &p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << context;
    EXPECT_NE(s.message().find("context " + std::to_string(context)), std::string::npos) << s.message();
  }
  // 2^40 tokens is in range, but not for a million layers of 256 x 256 heads.
  ModelShape wide = shape;
  wide.num_layers = wide.full_attention_layers = 1 << 20;
  wide.q_heads = wide.kv_heads = 256;
  Status s = PlanCapacity(wide, PlanPolicy{}, CapacityInputs{.context_tokens = int64_t(1) << 40}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("2^62 bytes"), std::string::npos) << s.message();
  // One token, but 65536-token pages (2^33 bytes each) over 2^31 - 1 layers: the tail pages' slack alone is
  // beyond 2^62 bytes.
  wide.num_layers = wide.full_attention_layers = std::numeric_limits<int>::max();
  s = PlanCapacity(wide, PlanPolicy{.page_tokens = 65536}, CapacityInputs{.context_tokens = 1}, &p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("65536-token pages"), std::string::npos) << s.message();
  // The largest context is planned exactly.
  ASSERT_TRUE(PlanCapacity(shape, PlanPolicy{}, CapacityInputs{.context_tokens = int64_t(1) << 40}, &p).ok());
  EXPECT_EQ(p.minima_pages.pages_per_layer, (int64_t(1) << 40) / 64);
  EXPECT_EQ(p.bf16.kv_bytes_per_request, (int64_t(1) << 40) * 16 * 2 * 4 * 256 * 2);
  // Anchors beyond any context: every page stays FP8.
  const PlanPolicy all_anchor{.anchor_tokens = std::numeric_limits<int64_t>::max()};
  ASSERT_TRUE(PlanCapacity(shape, all_anchor, CapacityInputs{.context_tokens = 32768}, &p).ok());
  EXPECT_EQ(p.minima_pages.pages_per_layer, 512);
  EXPECT_EQ(p.minima_pages.fp8_pages_per_layer, 512);
  EXPECT_EQ(p.minima_pages.tq3_pages_per_layer, 0);
}

TEST(ModelShapeFromHfConfig, QwenNestedTextConfigWithInterval) {
  const std::string config = R"({
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "text_config": {"num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
                    "head_dim": 256, "hidden_size": 5120, "full_attention_interval": 4},
    "vision_config": {"depth": 27}
  })";
  ModelShape s;
  const Status st = ModelShapeFromHfConfigText(config, "qwen", &s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.num_layers, 64);
  EXPECT_EQ(s.full_attention_layers, 16);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.head_dim, 256);
}

TEST(ModelShapeFromHfConfig, LayerTypesListAndHeadDimFromHiddenSize) {
  const std::string config = R"({"num_hidden_layers": 4, "num_attention_heads": 32, "num_key_value_heads": 8,
    "hidden_size": 4096, "sliding_window": 4096,
    "layer_types": ["sliding_attention", "full_attention", "linear_attention", "sliding_attention"]})";
  ModelShape s;
  const Status st = ModelShapeFromHfConfigText(config, "mixed", &s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.full_attention_layers, 1);
  EXPECT_EQ(s.sliding_attention_layers, 2);
  EXPECT_EQ(s.linear_attention_layers(), 1);
  EXPECT_EQ(s.sliding_window_tokens, 4096);

  // Plain Llama config: no layer_types, no interval -> every layer full attention; no kv heads -> MHA.
  ASSERT_TRUE(ModelShapeFromHfConfigText(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256})",
                                         "mha", &s).ok());
  EXPECT_EQ(s.full_attention_layers, 2);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.head_dim, 64);
}

TEST(ModelShapeFromHfConfig, ErrorsNameTheKey) {
  ModelShape s;
  Status st = ModelShapeFromHfConfigText(R"({"num_attention_heads": 4, "hidden_size": 256})", "x", &s);
  EXPECT_NE(st.message().find("num_hidden_layers"), std::string::npos) << st.message();
  st = ModelShapeFromHfConfigText(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
    "layer_types": ["full_attention", "mamba"]})", "x", &s);
  EXPECT_NE(st.message().find("layer_types\"[1]"), std::string::npos) << st.message();
  st = ModelShapeFromHfConfigText(R"({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256,
    "layer_types": ["full_attention"]})", "x", &s);
  EXPECT_NE(st.message().find("1 entries"), std::string::npos) << st.message();
  st = ModelShapeFromHfConfigText(R"({"num_hidden_layers": "two"})", "x", &s);
  EXPECT_NE(st.message().find("\"num_hidden_layers\" is \"two\""), std::string::npos) << st.message();
  st = ModelShapeFromHfConfigText(R"({"num_hidden_layers": 2,)", "x", &s);
  EXPECT_NE(st.message().find("byte"), std::string::npos) << st.message();
  st = ModelShapeFromHfConfigFile("/nonexistent/config.json", &s);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
}

// The JSON the CLI prints (minimakv plan --json): the fields the checks read, parsed back from text.
TEST(PlanReport, JsonCarriesEveryFormatAndThePaperReference) {
  JsonValue parsed;
  ASSERT_TRUE(ParseJson(PlanToJson(PlanQwen(32768)).Dump(2), &parsed).ok());
  const char* formats[] = {"bf16", "fp8", "minima"};
  const int64_t expected_concurrency[] = {28, 53, 109};
  for (int i = 0; i < 3; ++i) {
    const JsonValue* f = parsed.Find(formats[i]);
    ASSERT_NE(f, nullptr) << formats[i];
    ASSERT_NE(f->Find("kib_per_token"), nullptr);
    ASSERT_NE(f->Find("compression_vs_bf16"), nullptr);
    int64_t concurrency = -1;
    ASSERT_TRUE(f->Find("concurrency")->GetInt64(&concurrency));
    EXPECT_EQ(concurrency, expected_concurrency[i]) << formats[i];
  }
  EXPECT_EQ(parsed.Find("bf16")->Find("kib_per_token")->as_double(), 64.0);
  EXPECT_EQ(parsed.Find("minima")->Find("kib_per_token")->as_double(), 13.043);
  const JsonValue* paper = parsed.Find("paper_reference");
  ASSERT_NE(paper, nullptr);
  EXPECT_TRUE(paper->Find("inputs_match")->as_bool());
  EXPECT_EQ(paper->Find("minima")->Find("kib_per_token")->as_double(), 18.3);
  // No paper figures at a context the paper did not report.
  EXPECT_EQ(PlanToJson(PlanQwen(16384)).Find("paper_reference"), nullptr);

  const JsonValue several = PlansToJson({PlanQwen(32768), PlanQwen(65536)});
  const JsonValue* contexts = several.Find("contexts");
  ASSERT_NE(contexts, nullptr);
  ASSERT_EQ(contexts->size(), 2u);
  int64_t c64 = 0;
  ASSERT_TRUE(contexts->items()[1].Find("fp8")->Find("concurrency")->GetInt64(&c64));
  EXPECT_EQ(c64, 28);
  EXPECT_NE(PlansToText({PlanQwen(32768)}).find("minima"), std::string::npos);
}

}  // namespace
}  // namespace minimakv
