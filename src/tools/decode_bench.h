// The library behind `minimakv bench` and bench/decode_bench.cpp: time of one decode step (one query token
// per sequence, one layer) of the CPU attention paths on synthetic paged KV, against the BF16 path measured in
// the same run and against the machine's measured floors (tools/machine_floors.h).
//
// Paths: bf16, fp8, tq3 (every token in that format) and minima (anchors + recent window FP8, the rest TQ3,
// two kernels merged by AttendMixedCpu). Pages hold fresh Gaussian data from `seed`; caches are flushed
// between timed steps (a real decode step reads each layer's KV once, cold), unless flush_caches is off.
// The paths of one (context, batch) are timed in interleaved rounds (bf16, fp8, tq3, minima, bf16, ...), so
// other load on a shared machine affects them alike; us_per_step is the median over rounds.
// The memory floor is measured in the same rounds: each round ends with a cold read sweep of
// floor_sweep_bytes on the same thread pool (ReadSweep, tools/machine_floors.h), and a path's ratio_to_floor
// is the median over rounds of its time / the floor of its bytes at that round's bandwidth, because this
// VM's read bandwidth moves by 20% and more within minutes (docs/cpu-notes.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minimakv/cpu_attention.h"
#include "minimakv/status.h"
#include "minimakv/thread_pool.h"
#include "tools/synthetic_kv.h"

namespace minimakv {

// Default bytes of the per-round read sweep (the reasons are at its use in decode_bench.cpp).
inline constexpr size_t kDefaultFloorSweepBytes = size_t(256) << 20;
// Sequences per decode step at most (a larger batch is an InvalidArgument naming it).
inline constexpr int kMaxBenchBatch = 65536;

struct DecodeBenchConfig {
  std::string shape = "llama-3.1-8b";  // or "qwen3.6-27b", "qwen3-235b"
  std::vector<int64_t> contexts = {32768};
  std::vector<int> batches = {1};
  std::vector<int> threads = {2};
  int page_tokens = 64;
  int anchor_tokens = 256;
  int recent_tokens = 1024;
  int min_repeats = 5;
  double min_seconds = 0.5;
  uint64_t seed = 1;
  bool flush_caches = true;                        // evict the KV from the caches before each timed step
  std::vector<std::string> paths = {"bf16", "fp8", "tq3", "minima"};  // bf16 always runs (the baseline)
  // Kernel families to time, each with its own bf16 baseline, interleaved in the same rounds: "auto" (the
  // dispatcher's choice per format, GQA group and head_dim: src/kernels/cpu/cpu_dispatch.cpp), "amx", "avx512",
  // "scalar" (every format in that family); each optionally ":N" for at most N query rows per kernel task
  // (CpuAttentionOptions::max_task_rows; "auto:8,auto" times GQA groups above 8 in tasks of 8 against one task),
  // and optionally "/i8", "/i8s" or "/bf16" for the AMX TQ3 tile variant (CpuAttentionOptions::tq3_scores and
  // tq3_values: int8 scores and values, int8 scores with bf16 values, bf16 both).
  std::vector<std::string> isas = {"auto"};
  // Read sweep timed at the end of every round for the memory floor (flush_caches on; RunDecodeBench says why
  // this size).
  size_t floor_sweep_bytes = kDefaultFloorSweepBytes;
  // With flush_caches off a cold sweep would evict the warm paths, so the bandwidth is measured once before
  // the rounds instead, on a buffer this large (>> the 300 MiB L3, so it is cold by its own size).
  size_t floor_buffer_bytes = size_t(1) << 30;
};

struct DecodeBenchRow {
  std::string shape, path;  // path: bf16|fp8|tq3|minima
  std::string isa;          // kernel family that ran: amx, avx512, scalar, or amx+avx512 (minima, mixed);
                            // ":N" appended when the isa entry limited task rows to N, "/i8" or "/bf16"
                            // when it named the TQ3 score variant (tq3 and minima rows with TQ3 on AMX)
  int64_t context = 0;
  int batch = 0;
  int threads = 0;
  double us_per_step = 0.0;       // median wall time of one decode step
  double kv_bytes_read = 0.0;     // K and V payload (codes + scales) the step reads
  double gb_per_s = 0.0;          // kv_bytes_read / us_per_step
  double speedup_vs_bf16 = 0.0;   // bf16 us_per_step / this path's, same context, batch, threads, isa
  double floor_memory_us = 0.0;   // kv_bytes_read / measured read bandwidth at `threads` (read_gb_per_s)
  double floor_compute_us = 0.0;  // multiply-adds (QK and PV) / measured peak at `threads`: fp32 FMA, or
                                  // AMX bf16 (TDPBF16PS) for isa amx
  // Median over rounds of (this path's step time / max(its memory floor at that round's read bandwidth,
  // floor_compute_us)); equals us_per_step / max(floor_memory_us, floor_compute_us) when the bandwidth is
  // measured once (read_sweeps 0). MedianRatioToFloor.
  double ratio_to_floor = 0.0;
  double read_gb_per_s = 0.0;     // cold read bandwidth at `threads`: median over the rounds' sweeps, or the
                                  // one measurement before the rounds when read_sweeps is 0
  int read_sweeps = 0;            // rounds whose own read sweep judged this row (0: flush_caches off)
  double cpu_us_per_step = 0.0;   // median process CPU time per step / threads: the step time the kernel
                                  // would take with the cores to itself (robust to other load on the machine)
};

// A model layer's attention shape.
struct DecodeShape {
  std::string name;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
};
// "llama-3.1-8b" (32 / 8 heads, d 128), "qwen3.6-27b" full-attention layer (24 / 4, d 256) or "qwen3-235b"
// (Qwen3-235B-A22B: 64 / 4, d 128, a GQA group of 16).
Status LookupDecodeShape(const std::string& name, DecodeShape* shape);

// One benchmark case: the pools of one path for `batch` sequences of `context` tokens, and its queries.
class DecodeBenchCase {
 public:
  static Status Create(const DecodeShape& shape, const std::string& path, int64_t context, int batch,
                       const DecodeBenchConfig& config, std::unique_ptr<DecodeBenchCase>* out);
  // One decode step on the pool's threads with kernel family `isa` (auto, amx, avx512 or scalar). A persistent
  // pool, as a serving loop would keep: starting threads per step would cost ~37 us per worker.
  Status Step(ThreadPool& pool, const std::string& isa = "auto");
  double kv_bytes_read() const { return kv_bytes_read_; }
  double multiply_adds() const {  // all formats' (the tiers cover every token once)
    double total = 0.0;
    for (const auto& [format, macs] : multiply_adds_by_format_) total += macs;
    return total;
  }
  // The multiply-adds of each format's tokens (one entry per view: the minima path has an FP8 and a TQ3 one), so a
  // compute floor can charge each part at the peak of the kernel family that runs it.
  const std::vector<std::pair<KvFormat, double>>& multiply_adds_by_format() const { return multiply_adds_by_format_; }

 private:
  DecodeBenchCase() = default;
  DecodeShape shape_;
  HadamardRotation rotation_;
  std::vector<SyntheticPool> pools_;
  std::vector<PagedKvView> views_;
  std::vector<float> q_, out_, lse_;
  std::vector<int32_t> q_indptr_;
  double kv_bytes_read_ = 0.0;
  std::vector<std::pair<KvFormat, double>> multiply_adds_by_format_;
};

// Reads a buffer twice the last-level cache so data read before is no longer cached.
void FlushCpuCaches();

// The attention options that run kernel family `isa` ("auto", "amx", "avx512", "scalar", each optionally ":N",
// N = max_task_rows 1..16, then optionally "/i8" or "/bf16", the AMX TQ3 score variant); InvalidArgument else.
Status BenchIsaOptions(const std::string& isa, CpuAttentionOptions* options);

// ratio_to_floor over timing rounds: round r's step time step_seconds[r] against the larger of the memory floor
// of kv_bytes at that round's read bandwidth read_bytes_per_s[r] and compute_floor_seconds; the median over
// rounds (mean of the middle two for an even count). Both vectors hold one entry per round, same length > 0.
double MedianRatioToFloor(const std::vector<double>& step_seconds, const std::vector<double>& read_bytes_per_s,
                          double kv_bytes, double compute_floor_seconds);

Status RunDecodeBench(const DecodeBenchConfig& config, const std::function<void(const std::string&)>& progress,
                      std::vector<DecodeBenchRow>* rows);

}  // namespace minimakv
