#include "tools/fidelity.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace minimakv
