// minimakv plan: KV accounting and capacity (include/minimakv/capacity_plan.h).
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/capacity_plan.h"
#include "minimakv/model_shape.h"
#include "tools/plan_report.h"

namespace minimakv::cli {

int RunPlanCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv plan";
  std::string preset = "qwen3.6-27b";
  std::string config_path;
  std::vector<int64_t> contexts = {32768};
  PlanPolicy policy;
  CapacityInputs inputs;  // defaults: the paper's 96 GB GPU (86.4 GiB budget, 25.15 GiB weights, 0.153 GiB state)
  int64_t anchor_tokens = policy.anchor_tokens, recent_tokens = policy.recent_tokens;
  bool json = false;

  ArgParser parser(command,
                   "KV-cache bytes per live token for BF16, FP8 (per-tensor scale) and Minima-KV (our exact pages:\n"
                   "FP8 anchor + recent pages with per-(token, head) scales, TQ3 for the rest, page slack included),\n"
                   "compression, and how many concurrent requests fit in a memory budget:\n"
                   "  concurrency = floor((budget - weights) / (kv_bytes_per_request + state_per_request)).");
  parser.AddString("preset", "NAME", "model shape preset: qwen3.6-27b or llama-3.1-8b", &preset);
  parser.AddString("config", "PATH", "a Hugging Face config.json instead of --preset", &config_path);
  parser.AddIntList("context", "context length(s) in tokens; 32k = 32768", &contexts);
  parser.AddDouble("budget-gib", "GPU memory the engine may use, GiB", &inputs.budget_gib);
  parser.AddDouble("weights-gib", "model weights inside that budget, GiB", &inputs.weights_gib);
  parser.AddDouble("state-gib", "fixed state per request (linear-attention state, buffers), GiB",
                   &inputs.state_gib_per_request);
  parser.AddInt("page-tokens", "tokens per KV page", &policy.page_tokens);
  parser.AddInt("anchor-tokens", "leading tokens kept in FP8 pages (attention sinks, system prompt)", &anchor_tokens);
  parser.AddInt("recent-tokens", "most recent tokens kept in FP8 pages", &recent_tokens);
  parser.AddInt("bf16-layers",
                "full-attention layers stored wholly in BF16 pages (a model's key-bias outlier layers: 4 for "
                "Qwen2.5-Coder-1.5B, 0 without qkv biases)",
                &policy.bf16_layers);
  parser.AddBool("json", "print one JSON object (see docs/cli.md for its fields)", &json);
  parser.SetEpilog(
      "Examples:\n"
      "  minimakv plan --preset qwen3.6-27b --context 32768 --budget-gib 86.4 --weights-gib 25.15 --state-gib 0.153\n"
      "  minimakv plan --config path/to/config.json --context 32k,64k,128k --json\n"
      "With --json and one context: {model, inputs, policy, bf16, fp8, minima, paper_reference?}; with several:\n"
      "{model, inputs, policy, contexts: [{context_tokens, bf16, fp8, minima, paper_reference?}, ...]}.");
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  policy.anchor_tokens = anchor_tokens;
  policy.recent_tokens = recent_tokens;

  ModelShape shape;
  if (!config_path.empty()) {
    if (parser.WasSet("preset")) {
      return ReportError(command, Status::InvalidArgument("give --preset or --config, not both"));
    }
    const Status s = ModelShapeFromHfConfigFile(config_path, &shape);
    if (!s.ok()) return ReportError(command, s);
  } else {
    const Status s = ModelShapeFromPreset(preset, &shape);
    if (!s.ok()) return ReportError(command, s);
  }

  std::vector<CapacityPlan> plans;
  for (int64_t context : contexts) {
    CapacityInputs in = inputs;
    in.context_tokens = context;
    CapacityPlan plan;
    const Status s = PlanCapacity(shape, policy, in, &plan);
    if (!s.ok()) return ReportError(command, s);
    plans.push_back(std::move(plan));
  }
  if (json) {
    PrintJson(plans.size() == 1 ? PlanToJson(plans.front()) : PlansToJson(plans));
  } else {
    std::fputs(PlansToText(plans).c_str(), stdout);
  }
  return kExitOk;
}

}  // namespace minimakv::cli
