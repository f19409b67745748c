// minimakv bench: CPU decode-attention speed per storage path, via RunDecodeBench (src/tools/decode_bench.h).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "reports.h"

namespace minimakv::cli {

JsonValue DecodeBenchRowToJson(const DecodeBenchRow& r) {
  JsonValue o = JsonValue::Object();
  o.Set("shape", r.shape);
  o.Set("path", r.path);
  o.Set("isa", r.isa);
  o.Set("context", r.context);
  o.Set("batch", r.batch);
  o.Set("threads", r.threads);
  o.Set("us_per_step", r.us_per_step);
  o.Set("kv_bytes_read", r.kv_bytes_read);
  o.Set("gb_per_s", r.gb_per_s);
  o.Set("speedup_vs_bf16", r.speedup_vs_bf16);
  o.Set("floor_memory_us", r.floor_memory_us);
  o.Set("floor_compute_us", r.floor_compute_us);
  o.Set("ratio_to_floor", r.ratio_to_floor);
  o.Set("read_gb_per_s", r.read_gb_per_s);
  o.Set("read_sweeps", r.read_sweeps);
  o.Set("cpu_us_per_step", r.cpu_us_per_step);
  return o;
}

std::string DecodeBenchRowsToText(const std::vector<DecodeBenchRow>& rows) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-13s %-6s %-10s %7s %5s %7s %11s %11s %9s %8s %11s %11s %9s %9s\n", "shape",
                "path", "isa", "context", "batch", "threads", "us/step", "cpu us/step", "GB/s", "vs bf16", "floor mem",
                "floor cmp", "x floor", "read GB/s");
  out += line;
  for (const DecodeBenchRow& r : rows) {
    std::snprintf(line, sizeof(line),
                  "%-13s %-6s %-10s %7lld %5d %7d %11.1f %11.1f %9.2f %7.2fx %11.1f %11.1f %9.2f %9.1f\n", r.shape.c_str(),
                  r.path.c_str(), r.isa.c_str(), (long long)r.context, r.batch, r.threads, r.us_per_step,
                  r.cpu_us_per_step, r.gb_per_s, r.speedup_vs_bf16, r.floor_memory_us, r.floor_compute_us,
                  r.ratio_to_floor, r.read_gb_per_s);
    out += line;
  }
  return out;
}

// Runs the benchmark with a progress line on stderr.
Status RunDecodeBenchWithProgress(const DecodeBenchConfig& config, ProgressLine::Mode mode,
                                  std::vector<DecodeBenchRow>* rows) {
  ProgressLine progress("bench", mode);
  const Status s = RunDecodeBench(config, [&](const std::string& message) { progress.Update(message); }, rows);
  progress.Finish();
  return s;
}

int RunBenchCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv bench";
  DecodeBenchConfig config;
  int64_t seed = int64_t(config.seed);
  bool json = false, jsonl = false;
  std::string progress_mode = "auto";
  ArgParser parser(command,
                   "Times one decode step of attention over a synthetic paged KV cache on the CPU, per path:\n"
                   "bf16 (dense control), fp8, tq3 (all pages TQ3) and minima (anchor + recent tokens FP8, the rest\n"
                   "TQ3, merged). Reports time per step, KV bytes read, GB/s, speedup against the bf16 path of the\n"
                   "same run, and two floors measured on this machine (bytes / read bandwidth, multiply-adds / peak:\n"
                   "fp32 FMA peak, or the AMX bf16 peak for the AMX kernels). --isa auto,amx,avx512 times the kernel\n"
                   "families side by side (each with its own bf16 baseline).");
  parser.AddChoice("shape", {"llama-3.1-8b", "qwen3.6-27b", "qwen3-235b"}, "attention layer shape", &config.shape);
  parser.AddIntList("context", "context length(s) in tokens; 32k = 32768", &config.contexts);
  parser.AddIntList("batch", "sequences per decode step", &config.batches);
  parser.AddIntList("threads", "worker threads", &config.threads);
  parser.AddInt("page-tokens", "tokens per KV page", &config.page_tokens);
  parser.AddInt("anchor-tokens", "minima path: leading tokens in FP8", &config.anchor_tokens);
  parser.AddInt("recent-tokens", "minima path: most recent tokens in FP8", &config.recent_tokens);
  parser.AddInt("min-repeats", "timed repeats per row, at least", &config.min_repeats);
  parser.AddDouble("min-seconds", "timed seconds per row, at least", &config.min_seconds);
  parser.AddInt("seed", "seed of the synthetic K/V", &seed);
  std::string paths_text;
  for (const std::string& p : config.paths) {
    if (!paths_text.empty()) paths_text += ',';
    paths_text += p;
  }
  parser.AddString("paths", "P[,P...]", "paths to time, from bf16,fp8,tq3,minima (bf16 always runs: the baseline)",
                   &paths_text);
  std::string isas_text = "auto";
  parser.AddString("isa", "I[,I...]", "kernel families to time, from auto (per format, GQA group and head_dim the family "
                   "measured fastest, src/kernels/cpu/cpu_dispatch.cpp; at the Llama shape AMX for fp8 and tq3, "
                   "AVX-512 for bf16), amx, avx512, "
                   "scalar; also settable for a whole process with MINIMAKV_CPU_ISA. FAMILY:N limits kernel tasks "
                   "to N query rows (default 16; auto:8,auto times GQA groups above 8 cut into tasks of 8 against "
                   "one task per group); FAMILY/i8, FAMILY/i8s or FAMILY/bf16 picks the AMX TQ3 tiles (/i8: int8 scores "
                   "and values, the default where AMX-INT8 exists; /i8s: int8 scores, bf16 values; /bf16: bf16 for "
                   "both), e.g. auto/bf16,auto/i8s,auto/i8", &isas_text);
  parser.AddBool("flush-caches", "evict the KV from the CPU caches before each timed step (a real decode step "
                 "reads each layer cold); --flush-caches=false to time warm caches", &config.flush_caches);
  parser.AddBool("json", "print a JSON array of rows", &json);
  parser.AddBool("jsonl", "print one JSON row per line (JSON Lines)", &jsonl);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_mode);
  parser.SetEpilog("Example: minimakv bench --shape llama-3.1-8b --context 32768 --threads 2 --json");
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  config.seed = uint64_t(seed);
  config.isas.clear();
  for (size_t start = 0; start <= isas_text.size();) {
    const size_t comma = std::min(isas_text.find(',', start), isas_text.size());
    const std::string isa = isas_text.substr(start, comma - start);
    CpuAttentionOptions isa_options;  // validates FAMILY[:N] (BenchIsaOptions, tools/decode_bench.h)
    const Status isa_status = BenchIsaOptions(isa, &isa_options);
    if (!isa_status.ok()) {
      std::fprintf(stderr, "%s: error: bad value for --isa: %s\n", command.c_str(), isa_status.message().c_str());
      return kExitUsage;
    }
    config.isas.push_back(isa);
    start = comma + 1;
  }
  config.paths.clear();
  for (size_t start = 0; start <= paths_text.size();) {
    const size_t comma = std::min(paths_text.find(',', start), paths_text.size());
    const std::string path = paths_text.substr(start, comma - start);
    if (path != "bf16" && path != "fp8" && path != "tq3" && path != "minima") {
      std::fprintf(stderr, "%s: error: bad value for --paths: '%s' is not one of bf16, fp8, tq3, minima\n",
                   command.c_str(), path.c_str());
      return kExitUsage;
    }
    config.paths.push_back(path);
    start = comma + 1;
  }

  std::vector<DecodeBenchRow> rows;
  const Status s = RunDecodeBenchWithProgress(config, ProgressModeFrom(progress_mode), &rows);
  if (!s.ok()) return ReportError(command, s);
  PrintRows(rows, json, jsonl, &DecodeBenchRowToJson, &DecodeBenchRowsToText);
  return kExitOk;
}

}  // namespace minimakv::cli
