// minimakv tour: the README's main job. On a synthetic 32K-token sequence it shows the three things Minima-KV is
// about: bytes (capacity plan for Qwen3.6-27B with the paper's inputs), fidelity (attention-output error vs fp64),
// and CPU decode speed against the BF16 control (Llama-3.1-8B layer, 2 threads).
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/capacity_plan.h"
#include "minimakv/model_shape.h"
#include "reports.h"
#include "tools/plan_report.h"

namespace minimakv::cli {

namespace {

void Section(const char* title) { std::printf("\n== %s ==\n", title); }

}  // namespace

int RunTourCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv tour";
  int64_t context_tokens = 32768;
  int threads = 2;
  double min_seconds = 0.3;
  int num_queries = 8;
  bool json = false;
  std::string progress_mode = "auto";
  ArgParser parser(command,
                   "A short tour (under 2 minutes on 2 cores): 1) KV bytes and concurrent requests for Qwen3.6-27B with\n"
                   "the paper's 96 GB GPU inputs; 2) attention-output fidelity of bf16/fp8/tq3/minima against fp64\n"
                   "on a synthetic sequence; 3) CPU decode-step time of each path against bf16 (Llama-3.1-8B layer).");
  parser.AddInt("context", "tokens in the synthetic sequence; 32k = 32768", &context_tokens);
  parser.AddInt("threads", "worker threads for the speed part", &threads);
  parser.AddDouble("min-seconds", "timed seconds per speed row, at least", &min_seconds);
  parser.AddInt("num-queries", "decode queries for the fidelity part", &num_queries);
  parser.AddBool("json", "print one JSON object {plan, fidelity, bench}", &json);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_mode);
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  const ProgressLine::Mode mode = ProgressModeFrom(progress_mode);
  // The fidelity part's limit, checked before the plan doubles the context (2 * INT64_MAX overflowed).
  if (context_tokens < 1 || context_tokens > kMaxFidelityContext) {
    return ReportError(command, Status::InvalidArgument("--context " + std::to_string(context_tokens) +
                                                        " not in [1, 2^24]"));
  }

  // 1) Accounting: the paper's capacity model, ours beside it.
  ModelShape qwen;
  Status s = ModelShapeFromPreset("qwen3.6-27b", &qwen);
  if (!s.ok()) return ReportError(command, s);
  std::vector<CapacityPlan> plans;
  for (int64_t context : {context_tokens, 2 * context_tokens}) {
    CapacityPlan plan;
    s = PlanCapacity(qwen, PlanPolicy{}, CapacityInputs{.context_tokens = context}, &plan);
    if (!s.ok()) return ReportError(command, s);
    plans.push_back(std::move(plan));
  }
  if (!json) {
    std::printf("minimakv tour: Minima-KV keeps anchor + recent pages in FP8 and converts older pages to 3-bit TQ3;\n"
                "decode runs one kernel per format and merges their partial softmax states (log-sum-exp, base 2).\n");
    Section("1. Accounting: Qwen3.6-27B, the paper's 96 GB GPU (minimakv plan)");
    std::fputs(PlansToText(plans).c_str(), stdout);
    std::fflush(stdout);
  }

  // 2) Fidelity on a synthetic sequence (Llama-3.1-8B heads: d=128, 8 KV / 32 query heads).
  FidelityConfig fidelity_config;
  fidelity_config.context = context_tokens;
  fidelity_config.num_queries = num_queries;
  std::vector<FidelityRow> fidelity_rows;
  s = RunFidelityWithProgress(fidelity_config, mode, &fidelity_rows);
  if (!s.ok()) return ReportError(command, s);
  if (!json) {
    Section("2. Fidelity: attention output vs fp64 dense attention (minimakv fidelity)");
    std::printf("synthetic %lld-token sequence, head_dim %d, %d KV / %d query heads, %d queries\n",
                (long long)context_tokens, fidelity_config.head_dim, fidelity_config.kv_heads,
                fidelity_config.q_heads, fidelity_config.num_queries);
    std::fputs(FidelityRowsToText(fidelity_rows).c_str(), stdout);
    std::fflush(stdout);
  }

  // 3) Speed against the BF16 control measured in the same run.
  DecodeBenchConfig bench_config;
  bench_config.shape = "llama-3.1-8b";
  bench_config.contexts = {context_tokens};
  bench_config.threads = {threads};
  bench_config.min_seconds = min_seconds;
  std::vector<DecodeBenchRow> bench_rows;
  s = RunDecodeBenchWithProgress(bench_config, mode, &bench_rows);
  if (!s.ok()) return ReportError(command, s);

  if (json) {
    JsonValue out = JsonValue::Object();
    out.Set("plan", PlansToJson(plans));
    JsonValue f = JsonValue::Array();
    for (const FidelityRow& r : fidelity_rows) f.Append(FidelityRowToJson(r));
    out.Set("fidelity", std::move(f));
    JsonValue b = JsonValue::Array();
    for (const DecodeBenchRow& r : bench_rows) b.Append(DecodeBenchRowToJson(r));
    out.Set("bench", std::move(b));
    PrintJson(out);
    return kExitOk;
  }
  Section("3. Speed: one decode step on this CPU (minimakv bench)");
  std::printf("Llama-3.1-8B layer (32 query / 8 KV heads, d=128), %lld tokens, batch 1, %d threads\n",
              (long long)context_tokens, threads);
  std::fputs(DecodeBenchRowsToText(bench_rows).c_str(), stdout);
  double bf16_bytes = 0;
  for (const DecodeBenchRow& r : bench_rows) {
    if (r.path == "bf16") bf16_bytes = r.kv_bytes_read;
  }
  for (const DecodeBenchRow& r : bench_rows) {
    if (r.path == "bf16" || bf16_bytes <= 0) continue;
    std::printf("  %-6s reads %5.1f%% of bf16's bytes and runs %.2fx as fast\n", r.path.c_str(),
                100.0 * r.kv_bytes_read / bf16_bytes, r.speedup_vs_bf16);
  }
  std::printf("\nNext: minimakv plan --help, minimakv bench --help, minimakv fidelity --help; docs/cli.md.\n");
  return kExitOk;
}

}  // namespace minimakv::cli
