// minimakv fidelity: attention-output error of each storage path against fp64 dense attention, via RunFidelity
// (src/tools/fidelity.h).
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/model_shape.h"
#include "reports.h"

namespace minimakv::cli {

JsonValue FidelityRowToJson(const FidelityRow& r) {
  JsonValue o = JsonValue::Object();
  o.Set("path", r.path);
  o.Set("rel_l2", r.rel_l2);
  o.Set("cosine", r.cosine);
  o.Set("top1_agreement", r.top1_agreement);
  o.Set("bits_per_value", r.bits_per_value);
  return o;
}

std::string FidelityRowsToText(const std::vector<FidelityRow>& rows) {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof(line), "%-8s %12s %12s %15s %15s\n", "path", "rel L2", "cosine", "top-1 agree",
                "bits/value");
  out += line;
  for (const FidelityRow& r : rows) {
    std::snprintf(line, sizeof(line), "%-8s %12.3e %12.6f %15.4f %15.3f\n", r.path.c_str(), r.rel_l2, r.cosine,
                  r.top1_agreement, r.bits_per_value);
    out += line;
  }
  return out;
}

Status RunFidelityWithProgress(const FidelityConfig& config, ProgressLine::Mode mode, std::vector<FidelityRow>* rows) {
  ProgressLine progress("fidelity", mode);
  const Status s = RunFidelity(config, [&](const std::string& message) { progress.Update(message); }, rows);
  progress.Finish();
  return s;
}

int RunFidelityCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv fidelity";
  FidelityConfig config;
  std::string shape_name;
  int64_t seed = int64_t(config.seed);
  bool json = false, jsonl = false;
  std::string progress_mode = "auto";
  ArgParser parser(command,
                   "Decode attention over synthetic K/V with real structure (keys with a few large outlier channels\n"
                   "and RoPE per position, Gaussian values) stored as bf16, fp8, tq3 and the minima mix, compared\n"
                   "with fp64 dense attention on the original values: relative L2 error and cosine similarity of the\n"
                   "output, and how often the most-attended token is the same.");
  parser.AddString("shape", "NAME", "take head_dim / kv-heads / q-heads from a preset (qwen3.6-27b, llama-3.1-8b)",
                   &shape_name);
  parser.AddInt("head-dim", "head dimension (64, 128 or 256)", &config.head_dim);
  parser.AddInt("kv-heads", "KV heads", &config.kv_heads);
  parser.AddInt("q-heads", "query heads (a multiple of kv-heads)", &config.q_heads);
  parser.AddInt("context", "tokens in the sequence; 8k = 8192", &config.context);
  parser.AddInt("num-queries", "decode queries averaged over", &config.num_queries);
  parser.AddInt("page-tokens", "tokens per KV page", &config.page_tokens);
  parser.AddInt("anchor-tokens", "minima path: leading tokens in FP8", &config.anchor_tokens);
  parser.AddInt("recent-tokens", "minima path: most recent tokens in FP8", &config.recent_tokens);
  parser.AddInt("seed", "seed of the synthetic K/V and queries", &seed);
  parser.AddDouble("rope-theta", "RoPE base of the synthetic keys (Llama 3.1: 500000)", &config.rope_theta);
  parser.AddInt("outlier-channels", "key outlier channels per KV head", &config.outlier_channels);
  parser.AddDouble("outlier-scale", "scale of those channels", &config.outlier_scale);
  parser.AddInt("planted-tokens", "strongly attended tokens per (query, head)", &config.planted_tokens);
  parser.AddInt("threads", "worker threads", &config.num_threads);
  parser.AddBool("json", "print a JSON array of rows", &json);
  parser.AddBool("jsonl", "print one JSON row per line (JSON Lines)", &jsonl);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_mode);
  parser.SetEpilog("Example: minimakv fidelity --context 32k --json");
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  config.seed = uint64_t(seed);
  if (!shape_name.empty()) {
    ModelShape shape;
    const Status s = ModelShapeFromPreset(shape_name, &shape);
    if (!s.ok()) return ReportError(command, s);
    // Explicit per-field flags win over the preset.
    if (!parser.WasSet("head-dim")) config.head_dim = shape.head_dim;
    if (!parser.WasSet("kv-heads")) config.kv_heads = shape.kv_heads;
    if (!parser.WasSet("q-heads")) config.q_heads = shape.q_heads;
  }

  std::vector<FidelityRow> rows;
  const Status s = RunFidelityWithProgress(config, ProgressModeFrom(progress_mode), &rows);
  if (!s.ok()) return ReportError(command, s);
  PrintRows(rows, json, jsonl, &FidelityRowToJson, &FidelityRowsToText);
  return kExitOk;
}

}  // namespace minimakv::cli
