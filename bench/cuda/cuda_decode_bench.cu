// Decode-step benchmark of the CUDA kernels (plain executable, CUDA events). For each shape, context, batch and
// format: median time of one decode step (CudaDecodeRun: partial kernels, merge) over many runs,
// L2 flushed before every run; the exact KV bytes the step must read; GB/s; % of the read bandwidth measured in
// this same process; what the merge adds to the step (the step against the partial kernels alone, alternating run by
// run: merge_in_step_us) and the merge kernel's time alone (merge_us). Also FP8 -> TQ3 conversion throughput.
// Usage: minimakv_cuda_bench [--csv FILE] [--runs N] [--quick] [--flush read|memset] [--only SHAPE CTX BATCH]...
//   [--timeline N] [--tq3-ctas auto|narrow|wide|paired] [--query-tokens T] [--warmup-ms MS] [--graph]
// --graph (session 19): also time the step as a CUDA graph replay (the step captured once per format, the same
// kernels with their programmatic dependencies as graph edges), run by run beside the eager step, after the same
// flush: what a serving engine that replays its decode step from a graph pays. Printed as "graph", CSV column
// graph_us (empty without --graph).
// --warmup-ms MS (session 18): before timing a format, run its step (each after a flush, as the timed runs) for MS
// ms more, so that the timed runs see the SM clock the board holds with that step running continuously; without it
// they see the clock left by what ran before (the previous format's steps): at ~1 ms steps the board reaches its
// power limit and the ALU-bound TQ3 loop slows with the clock (docs/cuda-notes.md session 18).
// --query-tokens T (session 16): T query tokens per sequence (speculative decoding's verification step); the shape
// column then reads SHAPE-tT. The KV bytes are those of one read, whatever T.
// --timeline N (v19; needs a build with -DMINIMAKV_CUDA_TIMELINE=1): after each timed point, N more steps with the
// kernels' per-CTA %globaltimer probes read back, and a breakdown of the step printed (medians over the N steps; all
// times relative to the end of the L2 flush kernel, which the start event follows): flush end -> first partial CTA,
// per partial kernel the prologue, the loop-length spread over CTAs, the epilogue and the CTA end spread, last
// partial CTA end -> merge start / merge PDL wait done, merge duration, merge end -> stop event. With --csv FILE also
// FILE.timeline.csv (those medians) and FILE.ctas.csv (every CTA of every step: SM, start, prologue, loop, exit).
// L2 flush (--flush): read (default since v8) = one read sweep of a 256 MB buffer, which leaves the L2 full of
// clean lines; memset (v1-v7) = writing 256 MB, which leaves ~50 MB of dirty lines that the timed step must
// write back (measured: ~10 us more per step at every size). torch_sdpa_bench.py flushes the same way.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "minimakv/cuda_attention.h"
#include "minimakv/cuda_cache_ops.h"
#include "minimakv/page_layout.h"

using namespace minimakv;

#define CUDA_OK(expr)                                                                            \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "FATAL %s:%d: %s -> %s\n", __FILE__, __LINE__, #expr,                 \
                   cudaGetErrorString(e_));                                                      \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)
#define STATUS_OK(expr)                                                                          \
  do {                                                                                           \
    Status s_ = (expr);                                                                          \
    if (!s_.ok()) {                                                                              \
      std::fprintf(stderr, "FATAL %s:%d: %s\n", __FILE__, __LINE__, s_.ToString().c_str());      \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

constexpr size_t kFlushBytes = size_t(256) << 20;  // > 4x the 60 MB L2
constexpr int kPageTokens = 64;
constexpr int kAnchorTokens = 256;   // Minima mix: first tokens stay FP8 (anchors)
constexpr int kRecentTokens = 1024;  // and the recent window

__device__ inline uint32_t Hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

// Fills a pool with valid random pages: random codes (E4M3 NaN codes avoided, bf16 values in [-2, 2]) and
// finite scales, so timings see real data (never zeros).
__global__ void FillPoolKernel(uint8_t* pool, size_t pool_bytes, PageLayout layout, uint64_t salt) {
  const size_t page_bytes = layout.page_bytes();
  const size_t scales_begin = 2 * layout.vectors() * layout.code_bytes();
  for (size_t w = size_t(blockIdx.x) * blockDim.x + threadIdx.x; w < pool_bytes / 4;
       w += size_t(gridDim.x) * blockDim.x) {
    const size_t offset = (w * 4) % page_bytes;
    uint32_t value = Hash(w * 0x9E3779B97F4A7C15ull + salt);
    if (offset >= scales_begin) {
      if (layout.format == KvFormat::kFp8) {
        value = __float_as_uint(0.004f + float(value & 0xFFFF) * 1e-7f);  // fp32 scale
      } else {
        const uint16_t h0 = __half_as_ushort(__float2half_rn(0.05f + float(value & 0xFF) * 1e-4f));
        const uint16_t h1 = __half_as_ushort(__float2half_rn(0.05f + float((value >> 8) & 0xFF) * 1e-4f));
        value = uint32_t(h0) | (uint32_t(h1) << 16);  // two fp16 scales
      }
    } else if (layout.format == KvFormat::kBf16) {
      const float a = (float(value & 0xFFFF) / 65535.0f - 0.5f) * 4.0f;
      const float b = (float(value >> 16) / 65535.0f - 0.5f) * 4.0f;
      value = (__float_as_uint(a) >> 16) | (__float_as_uint(b) & 0xFFFF0000u);
    } else if (layout.format == KvFormat::kFp8) {
      value &= 0xF7F7F7F7u;  // clears bit 3 of each code: never 0x7F / 0xFF (NaN)
    }
    reinterpret_cast<uint32_t*>(pool)[w] = value;
  }
}

__global__ void ReadBandwidthKernel(const uint4* data, size_t count, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;  // keeps the loads alive
}

// The flush kernel of --timeline steps: the same reads, and the end time (%globaltimer of its last CTA) in end_ns.
__global__ void ReadBandwidthStampKernel(const uint4* data, size_t count, uint32_t* sink, unsigned long long* end_ns) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(data + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now)::"memory");
    atomicMax(end_ns, now);
  }
}

// Named scalar metrics of --timeline steps, in first-insertion order, medians over the steps.
struct Metrics {
  std::vector<std::string> names;
  std::vector<std::vector<double>> values;
  void Add(const std::string& name, double value) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) {
        values[i].push_back(value);
        return;
      }
    }
    names.push_back(name);
    values.push_back({value});
  }
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

// The SM clock over a partial kernel's key loop (cycles of the CTA's SM over its loop time); 0 for the merge.
double LoopMhz(const CudaCtaTimes& r) {
  const double ns = double(r.loop_end_ns - r.ready_ns);
  return r.loop_end_clk > r.ready_clk && ns > 0.0 ? double(r.loop_end_clk - r.ready_clk) / ns * 1e3 : 0.0;
}

// One --timeline step's records -> metrics (us; times relative to flush_end_ns).
void AddStepMetrics(const std::vector<CudaCtaTimes>& records, uint64_t flush_end_ns, double step_us, Metrics* m) {
  const char* kNames[kCudaTimelineKernels] = {"bf16", "fp8", "tq3", "merge"};
  auto us = [&](uint64_t t) { return (double(int64_t(t - flush_end_ns))) * 1e-3; };
  m->Add("step (events)", step_us);
  double first_partial_start = 1e30, last_partial_exit = -1e30;
  uint64_t resolution_ns = ~0ull;
  for (int k = 0; k < kCudaTimelineKernels; ++k) {
    std::vector<double> start, ready, prologue, loop, warp_spread, epilogue, exits, loop_mhz;
    std::vector<int> per_sm(1024, 0);
    for (int c = 0; c < kCudaTimelineMaxCtas; ++c) {
      const CudaCtaTimes& r = records[size_t(k) * kCudaTimelineMaxCtas + c];
      if (!r.written) continue;
      start.push_back(us(r.start_ns));
      ready.push_back(us(r.ready_ns));
      prologue.push_back(double(r.ready_ns - r.start_ns) * 1e-3);
      loop.push_back(double(r.loop_end_ns - r.ready_ns) * 1e-3);
      if (k != kCudaTimelineMerge) warp_spread.push_back(double(r.loop_end_ns - r.first_warp_ns) * 1e-3);
      if (k != kCudaTimelineMerge) loop_mhz.push_back(LoopMhz(r));
      epilogue.push_back(double(r.exit_ns - r.loop_end_ns) * 1e-3);
      exits.push_back(us(r.exit_ns));
      per_sm[r.sm % 1024]++;
      for (uint64_t d : {r.ready_ns - r.start_ns, r.loop_end_ns - r.ready_ns, r.exit_ns - r.loop_end_ns}) {
        if (d > 0) resolution_ns = std::min(resolution_ns, d);
      }
    }
    if (start.empty()) continue;
    const std::string n = kNames[k];
    int sms = 0, max_per_sm = 0;
    for (int c : per_sm) {
      sms += c > 0;
      max_per_sm = std::max(max_per_sm, c);
    }
    m->Add(n + " ctas", double(start.size()));
    m->Add(n + " sms", double(sms));
    m->Add(n + " max ctas/sm", double(max_per_sm));
    m->Add(n + " first start", Percentile(start, 0.0));
    m->Add(n + " last start", Percentile(start, 1.0));
    m->Add(n + " first ready", Percentile(ready, 0.0));
    m->Add(n + " prologue med", Percentile(prologue, 0.5));
    m->Add(n + " prologue max", Percentile(prologue, 1.0));
    m->Add(n + " loop min", Percentile(loop, 0.0));
    m->Add(n + " loop med", Percentile(loop, 0.5));
    m->Add(n + " loop max", Percentile(loop, 1.0));
    if (!warp_spread.empty()) m->Add(n + " warp spread med", Percentile(warp_spread, 0.5));
    if (!loop_mhz.empty()) {
      m->Add(n + " loop SM MHz min", Percentile(loop_mhz, 0.0));
      m->Add(n + " loop SM MHz med", Percentile(loop_mhz, 0.5));
    }
    m->Add(n + " epilogue med", Percentile(epilogue, 0.5));
    m->Add(n + " epilogue max", Percentile(epilogue, 1.0));
    m->Add(n + " first exit", Percentile(exits, 0.0));
    m->Add(n + " median exit", Percentile(exits, 0.5));
    m->Add(n + " last exit", Percentile(exits, 1.0));
    if (k != kCudaTimelineMerge) {
      first_partial_start = std::min(first_partial_start, Percentile(start, 0.0));
      last_partial_exit = std::max(last_partial_exit, Percentile(exits, 1.0));
    } else {
      m->Add("last partial exit -> merge first start", Percentile(start, 0.0) - last_partial_exit);
      m->Add("last partial exit -> merge first ready", Percentile(ready, 0.0) - last_partial_exit);
      m->Add("merge first ready -> last exit", Percentile(exits, 1.0) - Percentile(ready, 0.0));
      m->Add("merge end -> stop event", step_us - Percentile(exits, 1.0));
    }
  }
  m->Add("flush end -> first partial start", first_partial_start);
  m->Add("first partial start -> last partial exit", last_partial_exit - first_partial_start);
  m->Add("timer resolution seen", double(resolution_ns) * 1e-3);
}

struct Pool {
  PageLayout layout;
  uint8_t* d_pages = nullptr;
  int num_pages = 0;
};

Pool MakePool(KvFormat format, int kv_heads, int head_dim, int num_pages, uint64_t salt) {
  Pool pool;
  pool.layout = PageLayout{format, kv_heads, head_dim, kPageTokens};
  pool.num_pages = num_pages;
  if (num_pages == 0) return pool;
  const size_t bytes = pool.layout.page_bytes() * size_t(num_pages);
  CUDA_OK(cudaMalloc(&pool.d_pages, bytes));
  FillPoolKernel<<<132 * 16, 256>>>(pool.d_pages, bytes, pool.layout, salt);
  CUDA_OK(cudaGetLastError());
  return pool;
}

// A view over `tokens_per_seq` tokens of each sequence on shuffled pages of the pool, starting at page `first`.
struct View {
  std::vector<int32_t> indptr, ids, last;
  int32_t *d_indptr = nullptr, *d_ids = nullptr, *d_last = nullptr;
};

View MakeView(int batch, int tokens_per_seq, int pool_pages, std::mt19937_64& rng) {
  View v;
  const int pages = (tokens_per_seq + kPageTokens - 1) / kPageTokens;
  std::vector<int32_t> perm(pool_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  v.indptr.push_back(0);
  for (int s = 0; s < batch; ++s) {
    for (int p = 0; p < pages; ++p) v.ids.push_back(perm[size_t(s) * pages + p]);
    v.indptr.push_back(int32_t(v.ids.size()));
    v.last.push_back(tokens_per_seq - (pages - 1) * kPageTokens);
  }
  CUDA_OK(cudaMalloc(&v.d_indptr, v.indptr.size() * 4));
  CUDA_OK(cudaMalloc(&v.d_ids, std::max<size_t>(1, v.ids.size()) * 4));
  CUDA_OK(cudaMalloc(&v.d_last, v.last.size() * 4));
  CUDA_OK(cudaMemcpy(v.d_indptr, v.indptr.data(), v.indptr.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(v.d_ids, v.ids.data(), v.ids.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(v.d_last, v.last.data(), v.last.size() * 4, cudaMemcpyHostToDevice));
  return v;
}
void FreeView(View& v) {
  CUDA_OK(cudaFree(v.d_indptr));
  CUDA_OK(cudaFree(v.d_ids));
  CUDA_OK(cudaFree(v.d_last));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Timer {
  cudaEvent_t start, stop;
  Timer() {
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
};

struct Shape {
  const char* name;
  int num_q_heads, kv_heads, head_dim;
  bool one_point = false;  // v16 shapes: only 32K batch 8 in a full run (any point with --only), no conversion timing
  bool also_64k = false;   // v17: with one_point, 64K batch 8 too (the group-16 shape, where one K / V read pays most)
};
constexpr int kOnePointContext = 32768;
constexpr int kSecondPointContext = 65536;
constexpr int kOnePointBatch = 8;

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = nullptr;
  int runs = 30;
  bool quick = false;
  struct OnlyConfig {  // --only SHAPE CTX BATCH (repeatable): just these configurations, no conversion timing
    std::string shape;
    int ctx;
    int batch;
  };
  std::vector<OnlyConfig> only;
  bool skip_convert = false;
  bool flush_by_memset = false;
  int timeline_steps = 0;
  CudaTq3Ctas tq3_ctas = CudaTq3Ctas::kAuto;  // v23: the plan's TQ3 CTA shape (A/B in one binary)
  int query_tokens = 1;                       // session 16: query tokens per sequence
  int warmup_ms = 0;                          // session 18: steady-state warm-up per format
  bool time_graph = false;                    // session 19: also time graph replays of the step
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--csv") && i + 1 < argc) csv_path = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 3 < argc) {
      OnlyConfig config;
      config.shape = argv[++i];
      config.ctx = std::atoi(argv[++i]);
      config.batch = std::atoi(argv[++i]);
      only.push_back(config);
      skip_convert = true;
    }
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--graph")) time_graph = true;
    else if (!std::strcmp(argv[i], "--timeline") && i + 1 < argc) timeline_steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--flush") && i + 1 < argc) flush_by_memset = !std::strcmp(argv[++i], "memset");
    else if (!std::strcmp(argv[i], "--query-tokens") && i + 1 < argc) {
      query_tokens = std::atoi(argv[++i]);
      if (query_tokens < 1) {
        std::fprintf(stderr, "--query-tokens takes a count >= 1, not \"%s\"\n", argv[i]);
        return 2;
      }
    }
    else if (!std::strcmp(argv[i], "--warmup-ms") && i + 1 < argc) {
      warmup_ms = std::atoi(argv[++i]);
      if (warmup_ms < 0) {
        std::fprintf(stderr, "--warmup-ms takes milliseconds >= 0, not \"%s\"\n", argv[i]);
        return 2;
      }
    }
    else if (!std::strcmp(argv[i], "--tq3-ctas") && i + 1 < argc) {
      const char* value = argv[++i];
      if (!std::strcmp(value, "narrow")) tq3_ctas = CudaTq3Ctas::kNarrow;
      else if (!std::strcmp(value, "wide")) tq3_ctas = CudaTq3Ctas::kWide;
      else if (!std::strcmp(value, "paired")) tq3_ctas = CudaTq3Ctas::kPaired;
      else if (!std::strcmp(value, "auto")) tq3_ctas = CudaTq3Ctas::kAuto;
      else {
        std::fprintf(stderr, "--tq3-ctas takes auto, narrow, wide or paired, not \"%s\"\n", value);
        return 2;
      }
    }
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const int sm_count = prop.multiProcessorCount;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  Timer timer;
  uint8_t* d_flush;
  CUDA_OK(cudaMalloc(&d_flush, kFlushBytes));
  uint32_t* d_flush_sink;
  CUDA_OK(cudaMalloc(&d_flush_sink, 4));
  CUDA_OK(cudaMemset(d_flush, 1, kFlushBytes));
  unsigned long long* d_flush_end_ns;
  CUDA_OK(cudaMalloc(&d_flush_end_ns, sizeof(unsigned long long)));
  if (timeline_steps > 0 && !CudaTimelineCompiled()) {
    std::fprintf(stderr, "--timeline needs a build with -DMINIMAKV_CUDA_TIMELINE=1\n");
    return 2;
  }
  FILE* timeline_csv = nullptr;
  FILE* timeline_ctas_csv = nullptr;
  if (timeline_steps > 0 && csv_path) {
    timeline_csv = std::fopen((std::string(csv_path) + ".timeline.csv").c_str(), "w");
    if (timeline_csv) std::fprintf(timeline_csv, "shape,context,batch,format,metric,median_us,min_us,max_us\n");
    // Session 8: every CTA of every --timeline step (which SM, how long its key loop took), for per-SM analysis.
    timeline_ctas_csv = std::fopen((std::string(csv_path) + ".ctas.csv").c_str(), "w");
    if (timeline_ctas_csv) {
      std::fprintf(timeline_ctas_csv, "shape,context,batch,format,step,kernel,cta,sm,start_us,prologue_us,loop_us,exit_us,loop_mhz\n");
    }
  }
  auto flush_l2 = [&]() {
    if (flush_by_memset) {
      CUDA_OK(cudaMemsetAsync(d_flush, 0, kFlushBytes, stream));
    } else {
      ReadBandwidthKernel<<<sm_count * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(d_flush), kFlushBytes / 16,
                                                             d_flush_sink);
    }
  };
  // us of the stream work fn enqueues, between two events (after whatever the stream holds before).
  auto time_events = [&](auto&& fn) {
    CUDA_OK(cudaEventRecord(timer.start, stream));
    fn();
    CUDA_OK(cudaEventRecord(timer.stop, stream));
    CUDA_OK(cudaEventSynchronize(timer.stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, timer.start, timer.stop));
    return double(ms) * 1000.0;
  };
  auto time_once = [&](auto&& fn) {
    flush_l2();
    return time_events(fn);
  };

  // ---- read bandwidth, measured here: xor-reduce 4 GiB with 16-byte loads.
  double read_gbps = 0;
  {
    const size_t bytes = size_t(4) << 30;
    uint8_t* d_buf;
    uint32_t* d_sink;
    CUDA_OK(cudaMalloc(&d_buf, bytes));
    CUDA_OK(cudaMalloc(&d_sink, 4));
    FillPoolKernel<<<132 * 16, 256>>>(d_buf, bytes, PageLayout{KvFormat::kTq3, 1, 128, 64}, 1);
    std::vector<double> t;
    for (int r = 0; r < 15; ++r) {
      t.push_back(time_once([&] {
        ReadBandwidthKernel<<<sm_count * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(d_buf), bytes / 16,
                                                               d_sink);
      }));
    }
    read_gbps = double(bytes) / Median(t) * 1e-3;
    CUDA_OK(cudaFree(d_buf));
    CUDA_OK(cudaFree(d_sink));
  }
  std::printf("device %s, %d SMs, measured read bandwidth %.0f GB/s, L2 flush by %s\n", prop.name, sm_count,
              read_gbps, flush_by_memset ? "memset" : "read sweep");

  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  if (csv) {
    std::fprintf(csv, "kind,shape,context,batch,format,time_us,kv_bytes,gbps,pct_read_bw,merge_us,items,read_bw_gbps,"
                 "merge_in_step_us,graph_us\n");
  }
  // v16: a GQA group of 16 (Qwen3-235B-A22B: 64 q / 4 kv heads, d 128; v17: one CTA of two head tiles per KV head for
  // FP8 / TQ3) and head_dim 64 (Llama-3.2-1B: 32 q / 8 kv heads) at 32K batch 8 (Qwen3-235B also at 64K batch 8).
  // Session 15: a GQA group of 3 (Llama-3.2-3B: 24 q / 8 kv heads, d 128; TQ3 in paired CTAs with gapped rows) and
  // of 8 (Llama-3-70B: 64 q / 8 kv heads, d 128; all 8 MMA columns of one KV head) at 32K batch 8.
  // Session 20: Qwen2.5-Coder-1.5B (12 q / 2 kv heads, d 128, group 6), the real model of BENCHMARKS section 5, whose
  // key-bias outlier layers the sessions keep in BF16 (what a token's decode costs over its 28 layers).
  const Shape shapes[] = {{"qwen3.6-27b", 24, 4, 256},          {"llama3-8b", 32, 8, 128},
                          {"qwen3-235b", 64, 4, 128, true, true}, {"llama3.2-1b", 32, 8, 64, true},
                          {"llama3.2-3b", 24, 8, 128, true},     {"llama3-70b", 64, 8, 128, true},
                          {"qwen2.5-coder-1.5b", 12, 2, 128, true}};
  std::vector<int> contexts = {8192, 32768, 65536, 131072};
  std::vector<int> batches = {1, 8, 32};
  if (quick) {
    contexts = {32768};
    batches = {8};
  }
  std::mt19937_64 rng(7);
  const size_t kMemoryBudget = size_t(100) << 30;  // leave room on the 141 GB card
  // The points: with --only just those (any context and batch: session 17's capacity points use the batch each
  // format reaches at the memory limit), else every shape x context x batch of the lists above.
  struct BenchPoint {
    const Shape* shape;
    int ctx;
    int batch;
  };
  std::vector<BenchPoint> points;
  for (const OnlyConfig& c : only) {
    const Shape* match = nullptr;
    for (const Shape& shape : shapes) {
      if (c.shape == shape.name) match = &shape;
    }
    if (match == nullptr || c.ctx <= kAnchorTokens + kRecentTokens || c.ctx % kPageTokens != 0 || c.batch < 1) {
      std::fprintf(stderr, "--only %s %d %d: unknown shape, a context that is not a multiple of %d above the mix's %d "
                   "FP8 tokens, or batch < 1\n", c.shape.c_str(), c.ctx, c.batch, kPageTokens,
                   kAnchorTokens + kRecentTokens);
      return 2;
    }
    points.push_back({match, c.ctx, c.batch});
  }
  if (only.empty()) {
    for (const Shape& shape : shapes) {
      for (int ctx : contexts) {
        for (int batch : batches) {
          const bool listed_context = ctx == kOnePointContext || (shape.also_64k && ctx == kSecondPointContext);
          if (shape.one_point && (!listed_context || batch != kOnePointBatch)) continue;
          points.push_back({&shape, ctx, batch});
        }
      }
    }
  }
  for (const BenchPoint& point : points) {
    const Shape& shape = *point.shape;
    const int ctx = point.ctx;
    const int batch = point.batch;
    const size_t bf16_bytes = size_t(batch) * ctx * shape.kv_heads * 2 * 2 * shape.head_dim;
    if (bf16_bytes * 2 > kMemoryBudget) {
      std::printf("skip %s ctx %d batch %d: does not fit the memory budget\n", shape.name, ctx, batch);
      continue;
    }
    const int pages_per_seq = ctx / kPageTokens;
    const int fp8_mix_tokens = kAnchorTokens + kRecentTokens;
    const int tq3_mix_tokens = ctx - fp8_mix_tokens;
    Pool bf16 = MakePool(KvFormat::kBf16, shape.kv_heads, shape.head_dim, batch * pages_per_seq, 11);
    Pool fp8 = MakePool(KvFormat::kFp8, shape.kv_heads, shape.head_dim, batch * pages_per_seq, 12);
    Pool tq3 = MakePool(KvFormat::kTq3, shape.kv_heads, shape.head_dim, batch * pages_per_seq, 13);
    View full_bf16 = MakeView(batch, ctx, bf16.num_pages, rng);
    View full_fp8 = MakeView(batch, ctx, fp8.num_pages, rng);
    View full_tq3 = MakeView(batch, ctx, tq3.num_pages, rng);
    View mix_fp8 = MakeView(batch, fp8_mix_tokens, fp8.num_pages, rng);
    View mix_tq3 = MakeView(batch, tq3_mix_tokens, tq3.num_pages, rng);

    const size_t q_rows = size_t(batch) * query_tokens * shape.num_q_heads;
    const size_t q_floats = q_rows * shape.head_dim;
    float *d_q, *d_out, *d_lse;
    CUDA_OK(cudaMalloc(&d_q, q_floats * 4));
    CUDA_OK(cudaMalloc(&d_out, q_floats * 4));
    CUDA_OK(cudaMalloc(&d_lse, q_rows * 4));
    const std::string label = query_tokens == 1 ? std::string(shape.name)
                                                : std::string(shape.name) + "-t" + std::to_string(query_tokens);
    {
      std::vector<float> q(q_floats);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& x : q) x = normal(rng);
      CUDA_OK(cudaMemcpy(d_q, q.data(), q_floats * 4, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize());

    struct Variant {
      const char* name;
      std::vector<std::pair<const Pool*, const View*>> parts;
    };
    const Variant variants[] = {{"bf16", {{&bf16, &full_bf16}}},
                                {"fp8", {{&fp8, &full_fp8}}},
                                {"tq3", {{&tq3, &full_tq3}}},
                                {"mix", {{&fp8, &mix_fp8}, {&tq3, &mix_tq3}}}};
    for (const Variant& variant : variants) {
      CudaDecodeShape dshape{batch, shape.num_q_heads, shape.kv_heads, shape.head_dim,
                             1.0f / std::sqrt(float(shape.head_dim)), 42, tq3_ctas, query_tokens};
      std::vector<CudaViewLengths> lengths;
      std::vector<PagedKvView> views;
      size_t kv_bytes = 0;
      for (const auto& [pool, view] : variant.parts) {
        lengths.push_back({pool->layout.format, kPageTokens, view->indptr.data(), view->last.data()});
        PagedKvView pv;
        pv.layout = pool->layout;
        pv.pages = pool->d_pages;
        pv.num_seqs = batch;
        pv.page_indptr = view->d_indptr;
        pv.page_ids = view->d_ids;
        pv.last_page_tokens = view->d_last;
        views.push_back(pv);
        for (int s = 0; s < batch; ++s) {
          const int64_t tokens = int64_t(view->indptr[s + 1] - view->indptr[s] - 1) * kPageTokens + view->last[s];
          kv_bytes += size_t(tokens) * shape.kv_heads * 2 * BytesPerVector(pool->layout.format, shape.head_dim);
        }
      }
      CudaDecodePlan plan;
      STATUS_OK(CudaDecodePlan::Create(dshape, lengths.data(), int(lengths.size()), sm_count, &plan));
      void* d_ws;
      CUDA_OK(cudaMalloc(&d_ws, std::max<size_t>(plan.workspace_bytes(), 256)));
      STATUS_OK(plan.Upload(d_ws, stream));
      PartialStatesOut out{d_out, d_lse};
      auto step = [&] { STATUS_OK(CudaDecodeRun(plan, views.data(), int(views.size()), d_q, d_ws, out, stream)); };
      auto merge = [&] { STATUS_OK(CudaDecodeMerge(plan, d_ws, out, stream)); };
      auto partials = [&] {
        STATUS_OK(CudaDecodePartials(plan, views.data(), int(views.size()), d_q, d_ws, stream));
      };
      for (int w = 0; w < 3; ++w) time_once(step);
      // The step captured into a graph (after the eager warm-up runs, so nothing is set up lazily inside the capture).
      cudaGraphExec_t step_graph = nullptr;
      auto graph_step = [&] { CUDA_OK(cudaGraphLaunch(step_graph, stream)); };
      if (time_graph) {
        cudaGraph_t graph;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        step();
        CUDA_OK(cudaStreamEndCapture(stream, &graph));
        CUDA_OK(cudaGraphInstantiate(&step_graph, graph, 0));
        CUDA_OK(cudaGraphDestroy(graph));
        for (int w = 0; w < 3; ++w) time_once(graph_step);
      }
      const auto warmup_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(warmup_ms);
      while (std::chrono::steady_clock::now() < warmup_end) time_once(step);
      // The step and the step without its merge (the partial kernels alone) alternate run by run, so that their
      // difference, what the merge adds to the step, sees the same clocks; the merge kernel alone as an ordinary
      // launch after a flush (it then also pays a launch and the partial states' reads from DRAM).
      std::vector<double> t, tp, tm, tg;
      for (int r = 0; r < runs; ++r) {
        t.push_back(time_once(step));
        tp.push_back(time_once(partials));
        if (step_graph) tg.push_back(time_once(graph_step));
      }
      if (step_graph) CUDA_OK(cudaGraphExecDestroy(step_graph));
      const double graph_median_us = tg.empty() ? 0.0 : Median(tg);
      const std::string graph_us = tg.empty() ? std::string() : std::to_string(graph_median_us);
      for (int r = 0; r < std::max(5, runs / 3); ++r) tm.push_back(time_once(merge));
      const double us = Median(t);
      const double merge_in_step_us = us - Median(tp);
      const double gbps = double(kv_bytes) / us * 1e-3;
      std::printf("%-12s ctx %6d batch %2d %-5s %9.1f us  %10.1f MB  %6.0f GB/s  %5.1f%% of read BW  merge in step"
                  " %5.1f us (alone %5.1f)  items %d",
                  label.c_str(), ctx, batch, variant.name, us, kv_bytes / 1e6, gbps, 100.0 * gbps / read_gbps,
                  merge_in_step_us, Median(tm), plan.total_items());
      if (!tg.empty()) {
        std::printf("  graph %9.1f us (%5.1f%% of read BW)", graph_median_us,
                    100.0 * double(kv_bytes) / graph_median_us * 1e-3 / read_gbps);
      }
      std::printf("\n");
      if (csv) {
        std::fprintf(csv, "decode,%s,%d,%d,%s,%.2f,%zu,%.1f,%.2f,%.2f,%d,%.1f,%.2f,%s\n", label.c_str(), ctx, batch,
                     variant.name, us, kv_bytes, gbps, 100.0 * gbps / read_gbps, Median(tm), plan.total_items(),
                     read_gbps, merge_in_step_us, graph_us.c_str());
        std::fflush(csv);
      }
      if (timeline_steps > 0) {
        Metrics metrics;
        std::vector<CudaCtaTimes> records;
        for (int r = 0; r < timeline_steps; ++r) {
          STATUS_OK(CudaTimelineReset(stream));
          CUDA_OK(cudaMemsetAsync(d_flush_end_ns, 0, sizeof(unsigned long long), stream));
          ReadBandwidthStampKernel<<<sm_count * 8, 512, 0, stream>>>(
              reinterpret_cast<const uint4*>(d_flush), kFlushBytes / 16, d_flush_sink, d_flush_end_ns);
          const double step_us = time_events(step);
          unsigned long long flush_end_ns = 0;
          CUDA_OK(cudaMemcpy(&flush_end_ns, d_flush_end_ns, sizeof(flush_end_ns), cudaMemcpyDeviceToHost));
          STATUS_OK(CudaTimelineRead(&records));
          if (timeline_ctas_csv) {
            const char* kKernelNames[kCudaTimelineKernels] = {"bf16", "fp8", "tq3", "merge"};
            for (size_t i = 0; i < records.size(); ++i) {
              const CudaCtaTimes& t = records[i];
              if (!t.written) continue;
              std::fprintf(timeline_ctas_csv, "%s,%d,%d,%s,%d,%s,%zu,%u,%.3f,%.3f,%.3f,%.3f,%.0f\n", shape.name, ctx,
                           batch, variant.name, r, kKernelNames[i / kCudaTimelineMaxCtas], i % kCudaTimelineMaxCtas,
                           t.sm, double(int64_t(t.start_ns - flush_end_ns)) * 1e-3,
                           double(t.ready_ns - t.start_ns) * 1e-3, double(t.loop_end_ns - t.ready_ns) * 1e-3,
                           double(int64_t(t.exit_ns - flush_end_ns)) * 1e-3, LoopMhz(t));
            }
          }
          AddStepMetrics(records, flush_end_ns, step_us, &metrics);
        }
        std::printf("timeline %s ctx %d batch %d %s (%d steps; us, median over steps [min .. max]; "
                    "0 = flush end):\n",
                    shape.name, ctx, batch, variant.name, timeline_steps);
        for (size_t i = 0; i < metrics.names.size(); ++i) {
          const std::vector<double>& v = metrics.values[i];
          std::printf("  %-42s %8.2f  [%8.2f .. %8.2f]\n", metrics.names[i].c_str(), Percentile(v, 0.5),
                      Percentile(v, 0.0), Percentile(v, 1.0));
          if (timeline_csv) {
            std::fprintf(timeline_csv, "%s,%d,%d,%s,%s,%.3f,%.3f,%.3f\n", shape.name, ctx, batch, variant.name,
                         metrics.names[i].c_str(), Percentile(v, 0.5), Percentile(v, 0.0), Percentile(v, 1.0));
          }
        }
        std::fflush(stdout);
      }
      CUDA_OK(cudaFree(d_ws));
    }
    for (View* v : {&full_bf16, &full_fp8, &full_tq3, &mix_fp8, &mix_tq3}) FreeView(*v);
    for (Pool* p : {&bf16, &fp8, &tq3}) CUDA_OK(cudaFree(p->d_pages));
    CUDA_OK(cudaFree(d_q));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_lse));
  }

  // ---- conversion throughput: FP8 pages -> TQ3 pages (distinct pages, shuffled).
  for (const Shape& shape : shapes) {
    if (skip_convert) break;
    if (shape.one_point) continue;
    const int pages = 8192;
    Pool fp8 = MakePool(KvFormat::kFp8, shape.kv_heads, shape.head_dim, pages, 21);
    Pool tq3 = MakePool(KvFormat::kTq3, shape.kv_heads, shape.head_dim, pages, 22);
    std::vector<CudaConvertPair> pairs(pages);
    std::vector<int32_t> dst(pages);
    std::iota(dst.begin(), dst.end(), 0);
    std::shuffle(dst.begin(), dst.end(), rng);
    for (int i = 0; i < pages; ++i) pairs[i] = {i, dst[i], kPageTokens};
    CudaConvertPair* d_pairs;
    int32_t* d_flag;
    CUDA_OK(cudaMalloc(&d_pairs, pages * sizeof(CudaConvertPair)));
    CUDA_OK(cudaMalloc(&d_flag, 4));
    CUDA_OK(cudaMemcpy(d_pairs, pairs.data(), pages * sizeof(CudaConvertPair), cudaMemcpyHostToDevice));
    CudaConvertArgs args;
    args.fp8_layout = fp8.layout;
    args.tq3_layout = tq3.layout;
    args.d_fp8_pages = fp8.d_pages;
    args.d_tq3_pages = tq3.d_pages;
    args.d_pairs = d_pairs;
    args.num_pairs = pages;
    args.fp8_num_pages = fp8.num_pages;
    args.tq3_num_pages = tq3.num_pages;
    args.rotation_seed = 42;
    args.d_error_flag = d_flag;
    auto convert = [&] { STATUS_OK(CudaConvertFp8ToTq3(args, stream)); };
    time_once(convert);
    std::vector<double> t;
    for (int r = 0; r < 10; ++r) t.push_back(time_once(convert));
    const double us = Median(t);
    const size_t bytes = size_t(pages) * (fp8.layout.payload_bytes() + tq3.layout.payload_bytes());
    std::printf("convert %-12s %d pages of %d tokens: %.1f us, %.2f M pages/s, %.0f GB/s (fp8 read + tq3 written)\n",
                shape.name, pages, kPageTokens, us, pages / us, double(bytes) / us * 1e-3);
    if (csv) {
      std::fprintf(csv, "convert,%s,%d,%d,fp8->tq3,%.2f,%zu,%.1f,%.2f,0,0,%.1f,0,\n", shape.name, kPageTokens, pages, us,
                   bytes, double(bytes) / us * 1e-3, 100.0 * (double(bytes) / us * 1e-3) / read_gbps, read_gbps);
    }
    CUDA_OK(cudaFree(d_pairs));
    CUDA_OK(cudaFree(d_flag));
    CUDA_OK(cudaFree(fp8.d_pages));
    CUDA_OK(cudaFree(tq3.d_pages));
  }
  if (csv) std::fclose(csv);
  if (timeline_csv) std::fclose(timeline_csv);
  if (timeline_ctas_csv) std::fclose(timeline_ctas_csv);
  CUDA_OK(cudaFree(d_flush_end_ns));
  CUDA_OK(cudaFree(d_flush));
  CUDA_OK(cudaFree(d_flush_sink));
  return 0;
}
