#include "tools/decode_bench.h"

#include <gtest/gtest.h>

#include <set>

#include "minimakv/kv_format.h"
#include "tools/machine_floors.h"

namespace minimakv {
namespace {

TEST(DecodeBench, RowsCarryExactBytesAndConsistentRatios) {
  DecodeBenchConfig config;
  config.contexts = {1000};  // not a page multiple: the last page is partly filled
  config.batches = {2};
  config.threads = {1};
  config.min_repeats = 1;
  config.min_seconds = 0.0;
  config.flush_caches = false;
  config.floor_buffer_bytes = size_t(16) << 20;
  int progress_lines = 0;
  std::vector<DecodeBenchRow> rows;
  const Status status = RunDecodeBench(config, [&](const std::string&) { ++progress_lines; }, &rows);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_GT(progress_lines, 0);
  ASSERT_EQ(rows.size(), 4u);
  std::set<std::string> paths;
  // Llama layer: 8 KV heads, d = 128; 2 sequences x 1000 tokens, K and V.
  const double vectors = 2.0 * 1000 * 8 * 2;
  for (const DecodeBenchRow& row : rows) {
    paths.insert(row.path);
    EXPECT_EQ(row.shape, "llama-3.1-8b");
    EXPECT_EQ(row.context, 1000);
    EXPECT_EQ(row.batch, 2);
    EXPECT_GT(row.us_per_step, 0.0);
    EXPECT_GT(row.floor_memory_us, 0.0);
    EXPECT_GT(row.floor_compute_us, 0.0);
    EXPECT_NEAR(row.gb_per_s, row.kv_bytes_read / row.us_per_step * 1e-3, 1e-9 * row.gb_per_s);
    EXPECT_NEAR(row.ratio_to_floor, row.us_per_step / std::max(row.floor_memory_us, row.floor_compute_us), 1e-9);
    if (row.path == "bf16") {
      EXPECT_EQ(row.kv_bytes_read, vectors * BytesPerVector(KvFormat::kBf16, 128));
      EXPECT_EQ(row.speedup_vs_bf16, 1.0);
    } else if (row.path == "fp8") {
      EXPECT_EQ(row.kv_bytes_read, vectors * BytesPerVector(KvFormat::kFp8, 128));
    } else if (row.path == "tq3") {
      EXPECT_EQ(row.kv_bytes_read, vectors * BytesPerVector(KvFormat::kTq3, 128));
    } else {
      // Minima: FP8 anchors [0, 256) + recent tail from the page boundary at or below 1000 - 1024 -> the whole
      // context is FP8 at this length.
      EXPECT_EQ(row.kv_bytes_read, vectors * BytesPerVector(KvFormat::kFp8, 128));
    }
  }
  EXPECT_EQ(paths, (std::set<std::string>{"bf16", "fp8", "tq3", "minima"}));
  // Rows of one thread count and kernel family share the compute floor (same multiply-adds, same peak: fp32
  // FMA, or AMX bf16 for amx rows).
  for (const DecodeBenchRow& row : rows) {
    EXPECT_FALSE(row.isa.empty()) << row.path;
    for (const DecodeBenchRow& other : rows) {
      if (other.isa == row.isa) EXPECT_EQ(row.floor_compute_us, other.floor_compute_us) << row.path << " " << other.path;
    }
  }
}

TEST(DecodeBench, MinimaSplitsTiersAtPageBoundaries) {
  std::vector<TokenRange> fp8, tq3;
  SplitMinimaTiers(32768, 64, 256, 1024, &fp8, &tq3);
  ASSERT_EQ(fp8.size(), 2u);
  EXPECT_EQ(fp8[0].begin_token, 0);
  EXPECT_EQ(fp8[0].end_token, 256);
  EXPECT_EQ(fp8[1].begin_token, 32768 - 1024);
  EXPECT_EQ(fp8[1].end_token, 32768);
  ASSERT_EQ(tq3.size(), 1u);
  EXPECT_EQ(tq3[0].begin_token, 256);
  EXPECT_EQ(tq3[0].end_token, 32768 - 1024);
  // Recent window not on a page boundary: the tail starts at the boundary below, so it holds >= 1000 tokens.
  SplitMinimaTiers(5000, 64, 100, 1000, &fp8, &tq3);
  ASSERT_EQ(fp8.size(), 2u);
  EXPECT_EQ(fp8[0].end_token, 128);
  EXPECT_EQ(fp8[1].begin_token, 3968);  // floor((5000 - 1000) / 64) * 64
  EXPECT_EQ(tq3[0].begin_token, 128);
  EXPECT_EQ(tq3[0].end_token, 3968);
}

TEST(DecodeBench, RejectsBadConfig) {
  DecodeBenchConfig config;
  config.shape = "gpt-5";
  std::vector<DecodeBenchRow> rows;
  Status s = RunDecodeBench(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gpt-5"), std::string::npos);
  config = DecodeBenchConfig();
  config.threads = {0};
  EXPECT_NE(RunDecodeBench(config, nullptr, &rows).message().find("threads 0"), std::string::npos);
}

TEST(MachineFloors, MeasuresPositiveFloors) {
  MachineFloors floors;
  ASSERT_TRUE(MeasureMachineFloors(1, size_t(8) << 20, &floors).ok());
  EXPECT_GT(floors.read_bytes_per_s, 1e8);   // any machine reads > 100 MB/s
  EXPECT_GT(floors.fma_macs_per_s, 1e8);
  EXPECT_EQ(floors.threads, 1);
}

}  // namespace
}  // namespace minimakv
