#include "tools/decode_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <map>
#include <tuple>

#include "minimakv/kv_format.h"
#include "tools/machine_floors.h"

namespace minimakv {
namespace {

// Fallback when the OS does not report the last-level cache size.
constexpr size_t kFallbackLlcBytes = size_t(64) << 20;
// The decode query is a Gaussian vector; sm_scale is the usual 1/sqrt(head_dim).

double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Payload bytes one step reads from a view: K and V codes + scales of every listed token (page slack unread).
double ViewPayloadBytes(const SyntheticPool& pool) {
  double tokens = 0.0;
  for (int64_t n : pool.seq_tokens) tokens += double(n);
  return tokens * pool.layout.kv_heads * 2.0 * double(BytesPerVector(pool.layout.format, pool.layout.head_dim));
}

}  // namespace

Status LookupDecodeShape(const std::string& name, DecodeShape* shape) {
  if (name == "llama-3.1-8b") {
    *shape = {name, 32, 8, 128};
  } else if (name == "qwen3.6-27b") {
    *shape = {name, 24, 4, 256};
  } else if (name == "qwen3-235b") {  // Qwen3-235B-A22B: GQA group 16 (also Llama-3.1-405B's 128 / 8)
    *shape = {name, 64, 4, 128};
  } else {
    return Status::InvalidArgument("unknown shape '" + name + "' (known: llama-3.1-8b, qwen3.6-27b, qwen3-235b)");
  }
  return Status::Ok();
}

void FlushCpuCaches() {
  static std::vector<uint8_t> buffer = [] {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t llc_bytes = llc > 0 ? size_t(llc) : kFallbackLlcBytes;
    return std::vector<uint8_t>(2 * llc_bytes, 1);
  }();
  // Reading every cache line evicts what was cached before. Reads, not writes: dirty lines would be written
  // back during the timed step and charge it for traffic that is not its own.
  static volatile uint8_t sink = 0;
  uint8_t acc = 0;
  for (size_t i = 0; i < buffer.size(); i += 64) acc ^= buffer[i];
  sink = sink ^ acc;
}

Status DecodeBenchCase::Create(const DecodeShape& shape, const std::string& path, int64_t context, int batch,
                               const DecodeBenchConfig& config, std::unique_ptr<DecodeBenchCase>* out) {
  if (context < 1 || batch < 1) {
    return Status::InvalidArgument("context " + std::to_string(context) + " and batch " + std::to_string(batch) +
                                   " must be >= 1");
  }
  std::unique_ptr<DecodeBenchCase> bench(new DecodeBenchCase());
  bench->shape_ = shape;
  MINIMAKV_RETURN_IF_ERROR(HadamardRotation::Create(shape.head_dim, HadamardRotation::kDefaultSeed, &bench->rotation_));
  // Ranges per format for every sequence.
  std::vector<std::pair<KvFormat, std::vector<TokenRange>>> tiers;
  if (path == "bf16") {
    tiers.push_back({KvFormat::kBf16, {{0, context}}});
  } else if (path == "fp8") {
    tiers.push_back({KvFormat::kFp8, {{0, context}}});
  } else if (path == "tq3") {
    tiers.push_back({KvFormat::kTq3, {{0, context}}});
  } else if (path == "minima") {
    std::vector<TokenRange> fp8, tq3;
    SplitMinimaTiers(context, config.page_tokens, config.anchor_tokens, config.recent_tokens, &fp8, &tq3);
    tiers.push_back({KvFormat::kFp8, fp8});
    if (!tq3.empty()) tiers.push_back({KvFormat::kTq3, tq3});
  } else {
    return Status::InvalidArgument("unknown path '" + path + "' (known: bf16, fp8, tq3, minima)");
  }
  const size_t vector_floats = size_t(shape.kv_heads) * shape.head_dim;
  for (size_t i = 0; i < tiers.size(); ++i) {
    GaussianSource gauss(config.seed * 1000003u + i);
    const KvSource source = [&gauss, vector_floats](int, int64_t, float* k, float* v) {
      gauss.Fill(k, vector_floats);
      gauss.Fill(v, vector_floats);
    };
    const std::vector<std::vector<TokenRange>> ranges(size_t(batch), tiers[i].second);
    SyntheticPool pool;
    const PageLayout layout{tiers[i].first, shape.kv_heads, shape.head_dim, config.page_tokens};
    MINIMAKV_RETURN_IF_ERROR(BuildSyntheticPool(layout, &bench->rotation_, ranges, source, config.seed + 7 * i, &pool));
    bench->kv_bytes_read_ += ViewPayloadBytes(pool);
    int64_t tier_tokens = 0;
    for (const TokenRange& range : tiers[i].second) tier_tokens += range.end_token - range.begin_token;
    // QK and PV: 2 * head_dim multiply-adds per (query head, token).
    bench->multiply_adds_by_format_.push_back(
        {tiers[i].first, 2.0 * double(shape.head_dim) * shape.q_heads * double(tier_tokens) * batch});
    bench->pools_.push_back(std::move(pool));
  }
  for (const SyntheticPool& pool : bench->pools_) bench->views_.push_back(pool.View());
  bench->q_.resize(size_t(batch) * shape.q_heads * shape.head_dim);
  GaussianSource gauss(config.seed + 99);
  gauss.Fill(bench->q_.data(), bench->q_.size());
  bench->out_.resize(bench->q_.size());
  bench->lse_.resize(size_t(batch) * shape.q_heads);
  for (int s = 0; s <= batch; ++s) bench->q_indptr_.push_back(s);
  *out = std::move(bench);
  return Status::Ok();
}

Status BenchIsaOptions(const std::string& isa_entry, CpuAttentionOptions* options) {
  // "family/i8", "family/i8s", "family/bf16": the AMX TQ3 tile variants (CpuAttentionOptions::tq3_scores and
  // tq3_values), for A/B runs in one process: int8 scores and int8 values (session 9's default), int8 scores with
  // bf16 values (session 8's), bf16 scores and values.
  std::string isa = isa_entry;
  const size_t slash = isa.find('/');
  if (slash != std::string::npos) {
    const std::string variant = isa.substr(slash + 1);
    if (variant != "i8" && variant != "i8s" && variant != "bf16") {
      return Status::InvalidArgument("isa '" + isa_entry + "': the TQ3 variant after '/' must be i8, i8s or bf16");
    }
    options->tq3_scores = variant == "bf16" ? CpuTq3Scores::kBf16 : CpuTq3Scores::kInt8;
    options->tq3_values = variant == "i8" ? CpuTq3Values::kInt8 : CpuTq3Values::kBf16;
    isa = isa.substr(0, slash);
  }
  // "family:N": at most N query rows per kernel task (CpuAttentionOptions::max_task_rows), e.g. auto:8 for the
  // tasks of 8 rows that GQA groups above 8 ran as before 16-row AMX tasks.
  const size_t colon = isa.find(':');
  const std::string family = isa.substr(0, colon);
  if (family != "auto" && family != "amx" && family != "avx512" && family != "scalar") {
    return Status::InvalidArgument("isa '" + isa_entry +
                                   "' is not one of auto, amx, avx512, scalar (optionally :ROWS, /i8, /i8s or /bf16)");
  }
  options->family = family == "amx"      ? CpuKernelFamily::kAmx
                    : family == "avx512" ? CpuKernelFamily::kAvx512
                    : family == "scalar" ? CpuKernelFamily::kScalar
                                         : CpuKernelFamily::kAuto;
  if (colon != std::string::npos) {
    const std::string rows = isa.substr(colon + 1);
    const CpuAttentionOptions defaults;
    if (rows.empty() || rows.size() > 2 || rows.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(rows) < 1 || std::stoi(rows) > defaults.max_task_rows) {
      return Status::InvalidArgument("isa '" + isa + "': task rows after ':' must be 1.." +
                                     std::to_string(defaults.max_task_rows));
    }
    options->max_task_rows = std::stoi(rows);
  }
  return Status::Ok();
}

Status DecodeBenchCase::Step(ThreadPool& pool, const std::string& isa) {
  AttentionQueries queries;
  queries.q = q_.data();
  queries.q_indptr = q_indptr_.data();
  queries.num_seqs = int(q_indptr_.size()) - 1;
  queries.num_q_heads = shape_.q_heads;
  queries.sm_scale = float(1.0 / std::sqrt(double(shape_.head_dim)));
  CpuAttentionOptions options;
  MINIMAKV_RETURN_IF_ERROR(BenchIsaOptions(isa, &options));
  options.pool = &pool;
  return AttendMixedCpu(views_, queries, &rotation_, out_.data(), lse_.data(), options);
}

namespace {

// The kernel family a path runs at this shape's decode tasks (one query token: rows = the GQA group): its
// formats' family, or "amx+avx512" when they differ.
std::string PathIsa(const CpuAttentionOptions& options, const DecodeShape& shape, const std::string& path) {
  const int group = shape.q_heads / shape.kv_heads;
  auto isa = [&](KvFormat format) { return std::string(CpuKernelIsaFor(options, format, group, shape.head_dim)); };
  if (path == "bf16") return isa(KvFormat::kBf16);
  if (path == "fp8") return isa(KvFormat::kFp8);
  const std::string tq3 = isa(KvFormat::kTq3);
  if (path == "tq3" || tq3 == isa(KvFormat::kFp8)) return tq3;
  return "amx+avx512";
}

// PathIsa, with ":N" when the options limit task rows below the default, and "/i8", "/i8s" or "/bf16" when they
// name the TQ3 tile variant and a TQ3 view of the path runs on AMX (so A/B rows of one family differ).
std::string PathIsaLabel(const CpuAttentionOptions& options, const DecodeShape& shape, const std::string& path) {
  std::string isa = PathIsa(options, shape, path);
  if (options.max_task_rows != CpuAttentionOptions{}.max_task_rows) {
    isa.append(":").append(std::to_string(options.max_task_rows));
  }
  const int group = shape.q_heads / shape.kv_heads;
  const std::string scores = CpuTq3ScoresFor(options, group, shape.head_dim);
  const bool named = options.tq3_scores != CpuTq3Scores::kAuto || options.tq3_values != CpuTq3Values::kAuto;
  if (named && (path == "tq3" || path == "minima") && !scores.empty()) {
    const std::string values = CpuTq3ValuesFor(options, group, shape.head_dim);
    isa.append(scores != "int8" ? "/bf16" : values == "int8" ? "/i8" : "/i8s");
  }
  return isa;
}

}  // namespace

double MedianRatioToFloor(const std::vector<double>& step_seconds, const std::vector<double>& read_bytes_per_s,
                          double kv_bytes, double compute_floor_seconds) {
  std::vector<double> ratios;
  for (size_t r = 0; r < step_seconds.size() && r < read_bytes_per_s.size(); ++r) {
    const double memory_floor_seconds = kv_bytes / read_bytes_per_s[r];
    ratios.push_back(step_seconds[r] / std::max(memory_floor_seconds, compute_floor_seconds));
  }
  return ratios.empty() ? 0.0 : Median(ratios);
}

Status RunDecodeBench(const DecodeBenchConfig& config, const std::function<void(const std::string&)>& progress,
                      std::vector<DecodeBenchRow>* rows) {
  DecodeShape shape;
  MINIMAKV_RETURN_IF_ERROR(LookupDecodeShape(config.shape, &shape));
  if (config.contexts.empty() || config.batches.empty() || config.threads.empty()) {
    return Status::InvalidArgument("bench needs at least one context, batch and thread count");
  }
  for (int t : config.threads) {
    if (t < 1 || t > kMaxThreads) {
      return Status::InvalidArgument("threads " + std::to_string(t) + " must be in [1, " + std::to_string(kMaxThreads) +
                                     "]");
    }
  }
  for (int b : config.batches) {
    if (b > kMaxBenchBatch) {
      return Status::InvalidArgument("batch " + std::to_string(b) + " exceeds " + std::to_string(kMaxBenchBatch) +
                                     " sequences");
    }
  }
  if (config.anchor_tokens < 0 || config.recent_tokens < 0) {
    return Status::InvalidArgument("anchor_tokens " + std::to_string(config.anchor_tokens) + " and recent_tokens " +
                                   std::to_string(config.recent_tokens) + " must be >= 0");
  }
  if (config.min_repeats < 1) return Status::InvalidArgument("min_repeats must be >= 1");
  if (config.isas.empty()) return Status::InvalidArgument("bench needs at least one isa");
  std::vector<CpuAttentionOptions> isa_options;  // what each entry of config.isas asks for
  for (const std::string& isa : config.isas) {
    CpuAttentionOptions options;
    MINIMAKV_RETURN_IF_ERROR(BenchIsaOptions(isa, &options));
    isa_options.push_back(options);
  }
  std::vector<std::string> paths = {"bf16"};
  for (const std::string& p : config.paths) {
    if (p != "bf16" && std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
  }
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  if (config.flush_caches && config.floor_sweep_bytes == 0) {
    return Status::InvalidArgument("floor_sweep_bytes must be > 0");
  }
  // Compute peaks once per thread count (machine_floors.h: they move less than the bandwidth, and the memory
  // floor is the larger at the decode shapes). The read bandwidth: with flush_caches on, a sweep in every
  // round (below); off, once here.
  std::map<int, MachineFloors> floors;
  const size_t run_level_read_bytes = config.flush_caches ? 0 : config.floor_buffer_bytes;
  for (int t : config.threads) {
    say(std::string("measuring machine floors (") + (config.flush_caches ? "" : "read bandwidth, ") +
        "FMA and AMX peaks) on " + std::to_string(t) + " thread(s)");
    MINIMAKV_RETURN_IF_ERROR(CachedMachineFloors(t, run_level_read_bytes, &floors[t]));
  }
  // The per-round sweep. Its buffer is cold without a flush of its own: it is read once per round, after the
  // round's last path, and every round flushes the caches before each of its steps, so at least one flush
  // (a read of twice the LLC, FlushCpuCaches) lies between two sweeps, as between two steps of one path.
  // Hence it need not exceed the LLC (300 MiB, lscpu: the host socket's, shared with other tenants; 5 MiB per
  // core), and the default is 256 MiB: 256 chunks of 1 MiB for the threads to share (a thread that starts
  // late costs at most a chunk); 7-15 ms at the 18-36 GB/s this VM reads on 2 threads, against ~40 ms for
  // each of the round's flushes (one per path), so a round takes ~1-5% longer (the whole 32K bench: 25 + 7
  // rounds x ~9 ms of ~50 s); and a sweep lasts about as long as the steps it judges (3-28 ms at 32K), so
  // both see the same transients. Measured 2026-11-30, 8 rounds of flush + sweep, 2 threads: median 36.0
  // GB/s at 64 MiB, 36.7 at 256 MiB, 36.7 at 1 GiB (1 thread: 18.5 / 18.0 / 17.9), while 16 MiB read
  // 29.6 with a minimum of 4.4: too short against a wake-up or a descheduled thread.
  std::unique_ptr<ReadSweep> sweep;
  if (config.flush_caches) MINIMAKV_RETURN_IF_ERROR(ReadSweep::Create(config.floor_sweep_bytes, &sweep));
  rows->clear();
  for (int64_t context : config.contexts) {
    for (int batch : config.batches) {
      // All paths of one (context, batch) live at once and are timed in interleaved rounds, so load from other
      // jobs on a shared machine hits every path alike and the ratios against BF16 stay meaningful.
      std::vector<std::unique_ptr<DecodeBenchCase>> cases(paths.size());
      for (size_t i = 0; i < paths.size(); ++i) {
        say("building " + paths[i] + " pages: " + config.shape + ", " + std::to_string(context) + " tokens x " +
            std::to_string(batch) + " sequences");
        MINIMAKV_RETURN_IF_ERROR(DecodeBenchCase::Create(shape, paths[i], context, batch, config, &cases[i]));
      }
      for (int threads : config.threads) {
        say("timing " + std::to_string(paths.size()) + " paths on " + std::to_string(threads) + " thread(s), " +
            std::to_string(context) + " tokens x " + std::to_string(batch));
        const size_t isas = config.isas.size();
        ThreadPool pool(threads);
        for (const std::string& isa : config.isas) {
          for (auto& c : cases) MINIMAKV_RETURN_IF_ERROR(c->Step(pool, isa));  // warm-up: page faults, threads
        }
        if (sweep) sweep->Run(pool);  // warm-up too; the first round's flushes then evict it
        // Timings of (isa k, path i) at index k * paths + i.
        std::vector<std::vector<double>> wall(isas * paths.size()), cpu(isas * paths.size());
        std::vector<double> read_bytes_per_s;  // per round
        double total = 0.0;
        while (int(wall[0].size()) < config.min_repeats || total < config.min_seconds) {
          for (size_t k = 0; k < isas; ++k) {
            for (size_t i = 0; i < paths.size(); ++i) {
              if (config.flush_caches) FlushCpuCaches();
              const double cpu0 = ProcessCpuSeconds();
              const auto t0 = std::chrono::steady_clock::now();
              MINIMAKV_RETURN_IF_ERROR(cases[i]->Step(pool, config.isas[k]));
              const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
              cpu[k * paths.size() + i].push_back((ProcessCpuSeconds() - cpu0) / threads);
              wall[k * paths.size() + i].push_back(seconds);
              total += seconds;
            }
          }
          read_bytes_per_s.push_back(sweep ? double(sweep->bytes()) / sweep->Run(pool)
                                           : floors[threads].read_bytes_per_s);
        }
        const MachineFloors& f = floors[threads];
        const double read_median = Median(read_bytes_per_s);
        for (size_t k = 0; k < isas; ++k) {
          const double bf16_us = Median(wall[k * paths.size()]) * 1e6;  // paths[0] is bf16
          for (size_t i = 0; i < paths.size(); ++i) {
            const size_t index = k * paths.size() + i;
            DecodeBenchRow row;
            row.shape = config.shape;
            row.path = paths[i];
            row.isa = PathIsaLabel(isa_options[k], shape, paths[i]);
            row.context = context;
            row.batch = batch;
            row.threads = threads;
            row.us_per_step = Median(wall[index]) * 1e6;
            row.cpu_us_per_step = Median(cpu[index]) * 1e6;
            row.kv_bytes_read = cases[i]->kv_bytes_read();
            row.gb_per_s = row.kv_bytes_read / (row.us_per_step * 1e-6) / 1e9;
            row.read_gb_per_s = read_median / 1e9;
            row.read_sweeps = sweep ? int(read_bytes_per_s.size()) : 0;
            row.floor_memory_us = row.kv_bytes_read / read_median * 1e6;
            // Each format's multiply-adds at the peak of the family that runs them (a minima path may run its FP8
            // part on AVX-512 and its TQ3 part on AMX).
            row.floor_compute_us = 0.0;
            for (const auto& [format, macs] : cases[i]->multiply_adds_by_format()) {
              const bool format_amx = std::string(CpuKernelIsaFor(isa_options[k], format, shape.q_heads / shape.kv_heads,
                                                                  shape.head_dim)) == "amx" &&
                                      f.amx_bf16_macs_per_s > 0.0;
              row.floor_compute_us += macs / (format_amx ? f.amx_bf16_macs_per_s : f.fma_macs_per_s) * 1e6;
            }
            row.ratio_to_floor =
                MedianRatioToFloor(wall[index], read_bytes_per_s, row.kv_bytes_read, row.floor_compute_us * 1e-6);
            row.speedup_vs_bf16 = bf16_us / row.us_per_step;
            rows->push_back(row);
          }
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace minimakv
