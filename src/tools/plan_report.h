// Renders a CapacityPlan for the CLI: as a JSON object (minimakv plan --json) and as a readable table.
#pragma once

#include <string>
#include <vector>

#include "minimakv/capacity_plan.h"
#include "tools/json.h"

namespace minimakv {

// One context: {"model", "inputs", "policy", "bf16", "fp8", "minima", "paper_reference"?}. Each format object has
// kib_per_token, bits_per_value, compression_vs_bf16, compression_vs_fp8, kv_bytes_per_request, gib_per_request,
// concurrency; minima adds its page split. paper_reference appears for the qwen3.6-27b preset at the contexts
// the paper reports (32768, 65536); its inputs_match says whether budget/weights/state equal the paper's.
JsonValue PlanToJson(const CapacityPlan& plan);
// Several contexts of one model and policy: {"model", "inputs" (context_tokens is the list), "policy",
// "contexts": [{"context_tokens", "bf16", "fp8", "minima", "paper_reference"?}, ...]}.
JsonValue PlansToJson(const std::vector<CapacityPlan>& plans);
// Header lines + one table per context.
std::string PlansToText(const std::vector<CapacityPlan>& plans);

}  // namespace minimakv
