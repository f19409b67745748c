#include "tools/fidelity.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace minimakv {
namespace {

TEST(Fidelity, ErrorsOrderedByBitsAndBitsExact) {
  FidelityConfig config;
  config.head_dim = 64;
  config.kv_heads = 2;
  config.q_heads = 8;
  config.context = 2048;
  config.num_queries = 4;
  config.page_tokens = 64;
  config.anchor_tokens = 128;
  config.recent_tokens = 256;
  std::vector<FidelityRow> rows;
  const Status status = RunFidelity(config, nullptr, &rows);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].path, "bf16");
  EXPECT_EQ(rows[1].path, "fp8");
  EXPECT_EQ(rows[2].path, "tq3");
  EXPECT_EQ(rows[3].path, "minima");
  // Payload bits per value, d = 64: BF16 16; FP8 (64 codes + 4 scale bytes) * 8 / 64; TQ3 (24 + 2) * 8 / 64.
  EXPECT_DOUBLE_EQ(rows[0].bits_per_value, 16.0);
  EXPECT_DOUBLE_EQ(rows[1].bits_per_value, 8.5);
  EXPECT_DOUBLE_EQ(rows[2].bits_per_value, 3.25);
  // Minima: 128 anchor + 256 recent tokens FP8, the other 1664 TQ3.
  EXPECT_DOUBLE_EQ(rows[3].bits_per_value, (384 * 8.5 + 1664 * 3.25) / 2048);
  // More bits, less error; every path still points the same way as dense attention.
  EXPECT_LT(rows[0].rel_l2, rows[1].rel_l2);
  EXPECT_LT(rows[1].rel_l2, rows[2].rel_l2);
  EXPECT_LE(rows[3].rel_l2, rows[2].rel_l2 * 1.05);
  EXPECT_LT(rows[0].rel_l2, 0.03);  // bf16 rounding only
  EXPECT_GT(rows[0].cosine, 0.999);
  EXPECT_GT(rows[0].top1_agreement, 0.9);
  for (const FidelityRow& row : rows) {
    EXPECT_GT(row.cosine, 0.8) << row.path;
    EXPECT_LE(row.cosine, 1.0 + 1e-12) << row.path;
    EXPECT_GE(row.top1_agreement, 0.5) << row.path;
    EXPECT_LE(row.top1_agreement, 1.0) << row.path;
  }
}

TEST(Fidelity, RejectsBadShapes) {
  FidelityConfig config;
  config.q_heads = 12;
  config.kv_heads = 8;
  std::vector<FidelityRow> rows;
  Status s = RunFidelity(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("q_heads 12"), std::string::npos);
  config = FidelityConfig();
  config.head_dim = 100;
  EXPECT_EQ(RunFidelity(config, nullptr, &rows).code(), StatusCode::kInvalidArgument);
}

// Settings the synthetic data cannot take are errors naming them (was: outlier_channels -3 ended the process with
// std::length_error, a context of 2^24 + 1 with std::bad_alloc, rope_theta 0 gave "bf16 input vector holds a
// non-finite value" without naming the setting).
TEST(Fidelity, RejectsBadSettingsByName) {
  std::vector<FidelityRow> rows;
  auto expect_named = [&](const FidelityConfig& config, const std::string& name) {
    const Status s = RunFidelity(config, nullptr, &rows);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  };
  FidelityConfig c;
  c.outlier_channels = -3;
  expect_named(c, "outlier_channels -3");
  c = FidelityConfig();
  c.outlier_channels = 129;
  expect_named(c, "outlier_channels 129");
  c = FidelityConfig();
  c.context = kMaxFidelityContext + 1;
  expect_named(c, "context " + std::to_string(kMaxFidelityContext + 1));
  c = FidelityConfig();
  c.num_queries = kMaxFidelityQueries + 1;
  expect_named(c, "num_queries " + std::to_string(kMaxFidelityQueries + 1));
  for (double theta : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    c = FidelityConfig();
    c.rope_theta = theta;
    expect_named(c, "rope_theta");
  }
  c = FidelityConfig();
  c.outlier_scale = std::numeric_limits<double>::quiet_NaN();
  expect_named(c, "outlier_scale");
  c = FidelityConfig();
  c.planted_tokens = -1;
  expect_named(c, "planted_tokens -1");
  // Negative windows were clamped to 0 without a word.
  c = FidelityConfig();
  c.anchor_tokens = -5;
  expect_named(c, "anchor_tokens -5");
  c = FidelityConfig();
  c.recent_tokens = -7;
  expect_named(c, "recent_tokens -7");
  c = FidelityConfig();
  c.num_threads = 1000000;
  expect_named(c, "num_threads 1000000");
}

}  // namespace
}  // namespace minimakv
