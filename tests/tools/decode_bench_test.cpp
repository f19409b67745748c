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
    // Bandwidth measured once (flush_caches off): the median of per-round ratios is the ratio of the medians.
    EXPECT_NEAR(row.ratio_to_floor, row.us_per_step / std::max(row.floor_memory_us, row.floor_compute_us), 1e-9);
    EXPECT_EQ(row.read_sweeps, 0);
    EXPECT_NEAR(row.floor_memory_us, row.kv_bytes_read / (row.read_gb_per_s * 1e9) * 1e6, 1e-9 * row.floor_memory_us);
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

// The minima path's compute floor charges each format's multiply-adds at the peak of the family that runs it: at
// the Qwen3.6 shape in tasks of 2 rows ("auto:2") auto runs FP8 on AVX-512 (d 256, rows 2) and TQ3 on AMX, so its
// floor is FP8's share at the FMA peak plus TQ3's at the AMX peak (session 9: before, all of it at the FMA peak,
// which put that row below its own floor). (Whole groups of 6 run FP8 on AMX too since session 11.)
TEST(DecodeBench, MixedFamilyPathChargesEachFormatAtItsPeak) {
  DecodeBenchConfig config;
  config.shape = "qwen3.6-27b";
  config.isas = {"auto:2"};
  config.contexts = {4096};
  config.threads = {1};
  config.paths = {"fp8", "tq3", "minima"};
  config.min_repeats = 1;
  config.min_seconds = 0.0;
  config.flush_caches = false;
  config.floor_buffer_bytes = size_t(16) << 20;
  std::vector<DecodeBenchRow> rows;
  const Status status = RunDecodeBench(config, [](const std::string&) {}, &rows);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const DecodeBenchRow* fp8 = nullptr;
  const DecodeBenchRow* tq3 = nullptr;
  const DecodeBenchRow* minima = nullptr;
  for (const DecodeBenchRow& row : rows) {
    if (row.path == "fp8") fp8 = &row;
    if (row.path == "tq3") tq3 = &row;
    if (row.path == "minima") minima = &row;
  }
  ASSERT_TRUE(fp8 && tq3 && minima);
  if (minima->isa.rfind("amx+avx512", 0) != 0) GTEST_SKIP() << "minima runs one family here: " << minima->isa;
  // 4096 tokens: FP8 = anchors 256 + the recent tail from the page boundary at or below 4096 - 1024 (1024 tokens),
  // TQ3 = the 2816 tokens between; per-token multiply-adds are equal, so the floors scale by token share.
  const double fp8_share = (256.0 + 1024.0) / 4096.0;
  EXPECT_NEAR(minima->floor_compute_us, fp8->floor_compute_us * fp8_share + tq3->floor_compute_us * (1.0 - fp8_share),
              1e-9 * fp8->floor_compute_us);
  EXPECT_LT(minima->floor_compute_us, fp8->floor_compute_us);
}

// The ratio to the floor must pair each round's step time with the bandwidth measured in that round. Synthetic
// rounds in which the bandwidth moves 4x: kv_bytes 1e9 B, bandwidth 10, 5, 20 GB/s gives memory floors 0.1,
// 0.2, 0.05 s; steps of 2.0, 1.0 and 1.1 times those floors. Per-round ratios {2.0, 1.0, 1.1}: median 1.1.
// Against one bandwidth for the run (the median, 10 GB/s: floor 0.1 s) the median step 0.2 s would read 2.0,
// and against the first round's alone (also 10 GB/s) the same.
TEST(DecodeBench, RatioToFloorPairsEachRoundWithItsOwnBandwidth) {
  const std::vector<double> read_bytes_per_s = {10e9, 5e9, 20e9};
  const std::vector<double> step_seconds = {0.2, 0.2, 0.055};
  EXPECT_DOUBLE_EQ(MedianRatioToFloor(step_seconds, read_bytes_per_s, 1e9, 0.0), 1.1);
  // A compute floor above some rounds' memory floors replaces them there: floors max(0.1, 0.15) = 0.15,
  // max(0.2, 0.15) = 0.2, max(0.05, 0.15) = 0.15 -> ratios {4/3, 1, 11/30}: median 1.
  EXPECT_DOUBLE_EQ(MedianRatioToFloor(step_seconds, read_bytes_per_s, 1e9, 0.15), 1.0);
  // An even number of rounds: the mean of the middle two ratios {2.0, 1.0, 1.1, 4.0} -> (1.1 + 2.0) / 2.
  EXPECT_DOUBLE_EQ(MedianRatioToFloor({0.2, 0.2, 0.055, 0.4}, {10e9, 5e9, 20e9, 10e9}, 1e9, 0.0), 1.55);
  // Bandwidth constant over rounds: the ratio of the median step time to the one floor.
  EXPECT_DOUBLE_EQ(MedianRatioToFloor({0.3, 0.1, 0.2}, {10e9, 10e9, 10e9}, 1e9, 0.0), 2.0);
}

// With caches flushed, every round ends with its own read sweep, and the row's floor and bandwidth come from
// those sweeps (their median), not from a measurement before the rounds.
TEST(DecodeBench, FlushedRunsMeasureTheReadFloorInEveryRound) {
  DecodeBenchConfig config;
  config.contexts = {256};
  config.batches = {1};
  config.threads = {2};
  config.paths = {"bf16", "tq3"};
  config.min_repeats = 3;
  config.min_seconds = 0.0;  // exactly min_repeats rounds
  config.flush_caches = true;
  config.floor_sweep_bytes = size_t(8) << 20;
  std::vector<DecodeBenchRow> rows;
  const Status status = RunDecodeBench(config, nullptr, &rows);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(rows.size(), 2u);
  for (const DecodeBenchRow& row : rows) {
    EXPECT_EQ(row.read_sweeps, 3) << row.path;
    EXPECT_GT(row.read_gb_per_s, 0.1) << row.path;  // any machine reads > 100 MB/s
    EXPECT_NEAR(row.floor_memory_us, row.kv_bytes_read / (row.read_gb_per_s * 1e9) * 1e6, 1e-9 * row.floor_memory_us);
    EXPECT_GT(row.ratio_to_floor, 0.0) << row.path;
  }
  EXPECT_EQ(rows[0].read_gb_per_s, rows[1].read_gb_per_s);  // one sweep per round serves every path
  config.floor_sweep_bytes = 0;
  EXPECT_EQ(RunDecodeBench(config, nullptr, &rows).code(), StatusCode::kInvalidArgument);
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
  // Was: `minimakv bench --threads 200000` ended with std::system_error when the system refused a thread.
  config.threads = {200000};
  s = RunDecodeBench(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("threads 200000"), std::string::npos) << s.message();
  // Was: `minimakv bench --context 1099511627776` ended with std::bad_alloc (2^34 page ids), a batch of 2^20
  // sequences would have too.
  config = DecodeBenchConfig();
  config.contexts = {int64_t(1) << 40};
  config.paths = {"bf16"};
  config.flush_caches = false;
  s = RunDecodeBench(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("17179869184 pages of 64 tokens"), std::string::npos) << s.message();
  config.contexts = {64};
  config.batches = {1 << 20};
  s = RunDecodeBench(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("batch 1048576"), std::string::npos) << s.message();
  // Negative Minima windows (were clamped to 0 without a word).
  config.batches = {1};
  config.anchor_tokens = -5;
  s = RunDecodeBench(config, nullptr, &rows);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("anchor_tokens -5"), std::string::npos) << s.message();
}

TEST(MachineFloors, MeasuresPositiveFloors) {
  MachineFloors floors;
  ASSERT_TRUE(MeasureMachineFloors(1, size_t(8) << 20, &floors).ok());
  EXPECT_GT(floors.read_bytes_per_s, 1e8);   // any machine reads > 100 MB/s
  EXPECT_GT(floors.fma_macs_per_s, 1e8);
  EXPECT_EQ(floors.threads, 1);
  // buffer_bytes 0: compute peaks only.
  MachineFloors compute_only;
  ASSERT_TRUE(MeasureMachineFloors(1, 0, &compute_only).ok());
  EXPECT_EQ(compute_only.read_bytes_per_s, 0.0);
  EXPECT_EQ(compute_only.buffer_bytes, 0u);
  EXPECT_GT(compute_only.fma_macs_per_s, 1e8);
}

TEST(MachineFloors, ReadSweepRoundsToWholeChunks) {
  std::unique_ptr<ReadSweep> sweep;
  ASSERT_TRUE(ReadSweep::Create(3 * ReadSweep::kChunkBytes + 5, &sweep).ok());
  EXPECT_EQ(sweep->bytes(), 3 * ReadSweep::kChunkBytes);
  ASSERT_TRUE(ReadSweep::Create(1, &sweep).ok());
  EXPECT_EQ(sweep->bytes(), ReadSweep::kChunkBytes);
  ThreadPool pool(2);
  EXPECT_GT(sweep->Run(pool), 0.0);
  EXPECT_EQ(ReadSweep::Create(0, &sweep).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace minimakv
