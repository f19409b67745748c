#include "tools/plan_report.h"

#include <cmath>
#include <cstdio>

namespace minimakv {

namespace {

// Printed values are rounded to what a reader can use; exact bytes are printed as integers alongside.
double Round(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

constexpr int kRatioDigits = 4;
constexpr int kKibDigits = 4;

bool PaperInputsMatch(const CapacityInputs& in) {
  return in.budget_gib == kPaperBudgetGib && in.weights_gib == kPaperWeightsGib &&
         in.state_gib_per_request == kPaperStateGibPerRequest;
}

// The paper's figures apply only to its model (Qwen3.6-27B) at the contexts it reports.
const PaperCapacityRow* PaperRowFor(const CapacityPlan& plan) {
  if (plan.shape.name != "qwen3.6-27b") return nullptr;
  return FindPaperCapacityRow(plan.inputs.context_tokens);
}

JsonValue FootprintJson(const FormatFootprint& f, double state_gib) {
  JsonValue o = JsonValue::Object();
  o.Set("kib_per_token", Round(f.kib_per_token, kKibDigits));
  o.Set("bits_per_value", Round(f.bits_per_value, kRatioDigits));
  o.Set("compression_vs_bf16", Round(f.compression_vs_bf16, kRatioDigits));
  o.Set("compression_vs_fp8", Round(f.compression_vs_fp8, kRatioDigits));
  o.Set("kv_bytes_per_request", f.kv_bytes_per_request);
  o.Set("gib_per_request", Round(double(f.kv_bytes_per_request) / kBytesPerGib + state_gib, kKibDigits));
  o.Set("concurrency", f.concurrency);
  return o;
}

JsonValue ModelJson(const ModelShape& s) {
  JsonValue o = JsonValue::Object();
  o.Set("name", s.name);
  o.Set("num_layers", s.num_layers);
  o.Set("full_attention_layers", s.full_attention_layers);
  o.Set("sliding_attention_layers", s.sliding_attention_layers);
  if (s.sliding_attention_layers > 0) o.Set("sliding_window_tokens", s.sliding_window_tokens);
  o.Set("linear_attention_layers", s.linear_attention_layers());
  o.Set("q_heads", s.q_heads);
  o.Set("kv_heads", s.kv_heads);
  o.Set("head_dim", s.head_dim);
  return o;
}

JsonValue PolicyJson(const PlanPolicy& p) {
  JsonValue o = JsonValue::Object();
  o.Set("page_tokens", p.page_tokens);
  o.Set("anchor_tokens", p.anchor_tokens);
  o.Set("recent_tokens", p.recent_tokens);
  o.Set("bf16_layers", p.bf16_layers);
  return o;
}

JsonValue PaperJson(const PaperCapacityRow& row, const CapacityInputs& inputs) {
  JsonValue o = JsonValue::Object();
  o.Set("source", "arXiv 2608.23834 (Qwen3.6-27B, 96 GB GPU)");
  o.Set("inputs_match", PaperInputsMatch(inputs));
  JsonValue bf16 = JsonValue::Object();
  bf16.Set("kib_per_token", 64.0);
  bf16.Set("concurrency", row.bf16_concurrency);
  JsonValue fp8 = JsonValue::Object();
  fp8.Set("kib_per_token", 32.0);
  fp8.Set("concurrency", row.fp8_concurrency);
  JsonValue minima = JsonValue::Object();
  minima.Set("kib_per_token", kPaperMinimaKibPerToken);
  minima.Set("compression_vs_bf16", kPaperMinimaCompressionVsBf16);
  minima.Set("compression_vs_fp8", kPaperMinimaCompressionVsFp8);
  minima.Set("concurrency", row.minima_concurrency);
  o.Set("bf16", std::move(bf16));
  o.Set("fp8", std::move(fp8));
  o.Set("minima", std::move(minima));
  return o;
}

// The per-context part: formats, page split, paper reference.
void AddContextFields(const CapacityPlan& plan, JsonValue* o) {
  const double state = plan.inputs.state_gib_per_request;
  o->Set("bf16", FootprintJson(plan.bf16, state));
  o->Set("fp8", FootprintJson(plan.fp8, state));
  JsonValue minima = FootprintJson(plan.minima, state);
  const MinimaBreakdown& m = plan.minima_pages;
  minima.Set("pages_per_layer", m.pages_per_layer);
  minima.Set("fp8_pages_per_layer", m.fp8_pages_per_layer);
  minima.Set("tq3_pages_per_layer", m.tq3_pages_per_layer);
  minima.Set("fp8_page_bytes", m.fp8_page_bytes);
  minima.Set("tq3_page_bytes", m.tq3_page_bytes);
  minima.Set("slack_tokens_per_layer", m.slack_tokens_per_layer);
  minima.Set("metadata_bytes_per_request", m.metadata_bytes_per_request);
  minima.Set("fp8_byte_fraction", Round(m.fp8_byte_fraction, kRatioDigits));
  minima.Set("bf16_page_bytes", m.bf16_page_bytes);
  minima.Set("bf16_byte_fraction", Round(m.bf16_byte_fraction, kRatioDigits));
  o->Set("minima", std::move(minima));
  if (const PaperCapacityRow* row = PaperRowFor(plan)) o->Set("paper_reference", PaperJson(*row, plan.inputs));
}

JsonValue InputsJson(const CapacityInputs& in, JsonValue context) {
  JsonValue o = JsonValue::Object();
  o.Set("context_tokens", std::move(context));
  o.Set("budget_gib", in.budget_gib);
  o.Set("weights_gib", in.weights_gib);
  o.Set("state_gib_per_request", in.state_gib_per_request);
  return o;
}

std::string Format(const char* fmt, auto... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), fmt, args...);
  return buffer;
}

}  // namespace

JsonValue PlanToJson(const CapacityPlan& plan) {
  JsonValue o = JsonValue::Object();
  o.Set("model", ModelJson(plan.shape));
  o.Set("inputs", InputsJson(plan.inputs, JsonValue(plan.inputs.context_tokens)));
  o.Set("policy", PolicyJson(plan.policy));
  AddContextFields(plan, &o);
  return o;
}

JsonValue PlansToJson(const std::vector<CapacityPlan>& plans) {
  if (plans.empty()) return JsonValue::Object();
  JsonValue contexts = JsonValue::Array();
  JsonValue context_list = JsonValue::Array();
  for (const CapacityPlan& plan : plans) {
    JsonValue c = JsonValue::Object();
    c.Set("context_tokens", plan.inputs.context_tokens);
    AddContextFields(plan, &c);
    contexts.Append(std::move(c));
    context_list.Append(plan.inputs.context_tokens);
  }
  JsonValue o = JsonValue::Object();
  o.Set("model", ModelJson(plans.front().shape));
  o.Set("inputs", InputsJson(plans.front().inputs, std::move(context_list)));
  o.Set("policy", PolicyJson(plans.front().policy));
  o.Set("contexts", std::move(contexts));
  return o;
}

std::string PlansToText(const std::vector<CapacityPlan>& plans) {
  if (plans.empty()) return "";
  const CapacityPlan& first = plans.front();
  const ModelShape& s = first.shape;
  std::string out;
  out += Format("Model %s: %d layers (%d full attention", s.name.c_str(), s.num_layers, s.full_attention_layers);
  if (s.sliding_attention_layers > 0) {
    out += Format(", %d sliding over %lld tokens", s.sliding_attention_layers, (long long)s.sliding_window_tokens);
  }
  out += Format(", %d linear), %d query / %d KV heads, head_dim %d\n", s.linear_attention_layers(), s.q_heads,
                s.kv_heads, s.head_dim);
  out += Format("Memory: budget %g GiB, weights %g GiB, fixed state %g GiB per request\n", first.inputs.budget_gib,
                first.inputs.weights_gib, first.inputs.state_gib_per_request);
  out += Format("Minima-KV policy: %d-token pages; first %lld (anchor) and last %lld (recent) tokens FP8, rest TQ3\n",
                first.policy.page_tokens, (long long)first.policy.anchor_tokens,
                (long long)first.policy.recent_tokens);
  for (const CapacityPlan& plan : plans) {
    const PaperCapacityRow* paper = PaperRowFor(plan);
    out += Format("\nContext %lld tokens\n", (long long)plan.inputs.context_tokens);
    out += Format("  %-7s %10s %10s %8s %8s %12s %12s%s\n", "format", "KiB/token", "bits/value", "vs BF16", "vs FP8",
                  "GiB/request", "concurrency", paper ? "   paper" : "");
    struct Line {
      const char* name;
      const FormatFootprint* f;
      std::string paper_text;
    };
    const Line lines[] = {
        {"bf16", &plan.bf16, paper ? Format("%8lld", (long long)paper->bf16_concurrency) : ""},
        {"fp8", &plan.fp8, paper ? Format("%8lld", (long long)paper->fp8_concurrency) : ""},
        {"minima", &plan.minima,
         paper ? Format("%8lld  (paper: %.1f KiB/token, %.2fx)", (long long)paper->minima_concurrency,
                        kPaperMinimaKibPerToken, kPaperMinimaCompressionVsBf16)
               : ""},
    };
    for (const Line& l : lines) {
      const double gib = double(l.f->kv_bytes_per_request) / kBytesPerGib + plan.inputs.state_gib_per_request;
      out += Format("  %-7s %10.3f %10.3f %7.2fx %7.2fx %12.3f %12lld", l.name, l.f->kib_per_token,
                    l.f->bits_per_value, l.f->compression_vs_bf16, l.f->compression_vs_fp8, gib,
                    (long long)l.f->concurrency) +
             l.paper_text + "\n";
    }
    const MinimaBreakdown& m = plan.minima_pages;
    out += Format("  minima pages per full-attention layer: %lld = %lld FP8 (%lld B each) + %lld TQ3 (%lld B each); "
                  "FP8 holds %.1f%% of the bytes\n",
                  (long long)m.pages_per_layer, (long long)m.fp8_pages_per_layer, (long long)m.fp8_page_bytes,
                  (long long)m.tq3_pages_per_layer, (long long)m.tq3_page_bytes, 100.0 * m.fp8_byte_fraction);
    if (plan.policy.bf16_layers > 0) {
      out += Format("  minima BF16 layers: %d, all %lld pages BF16 (%lld B each); BF16 holds %.1f%% of the bytes\n",
                    plan.policy.bf16_layers, (long long)m.pages_per_layer, (long long)m.bf16_page_bytes,
                    100.0 * m.bf16_byte_fraction);
    }
    if (paper && !PaperInputsMatch(plan.inputs)) {
      out += "  (the paper column used budget 86.4 GiB, weights 25.15 GiB, state 0.153 GiB: not these inputs)\n";
    }
  }
  return out;
}

}  // namespace minimakv
