// minimakv run: the end-to-end demo. A passkey-retrieval prompt of several thousand tokens on the default model,
// prefilled ONCE (its K/V stored into one cache per KV mode), then the answer decoded in every mode; one row per
// mode: KV bytes per token, compression vs BF16, the answer, correct or not, decode tokens/s.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/inference_session.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/passkey_task.h"
#include "minimakv/retention_policy.h"
#include "minimakv/sampler.h"

namespace minimakv::cli {

int RunRunCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv run";
  std::string model_path = DefaultModelPath();
  int64_t context_tokens = 4096, seed = 1;
  double depth = 0.5;
  int answer_tokens = 8, threads = 2, page_tokens = 64;
  bool json = false;
  std::string progress_flag = "auto";
  HotLayerFlags hot_layers;
  ArgParser parser(command,
                   "Passkey retrieval on a real model with the KV cache in every mode (bf16 control, fp8, tq3, minima).\n"
                   "The prompt is prefilled once on full-precision K/V; its K/V go into one cache per mode (written and\n"
                   "converted as each mode's policy says), then each mode decodes the answer greedily from its own cache.");
  parser.AddString("model", "PATH", "GGUF model (default: SmolLM2-135M-Instruct from scripts/fetch_model.sh)", &model_path);
  parser.AddInt("context", "prompt length in tokens", &context_tokens);
  parser.AddDouble("depth", "needle position as a fraction of the filler, 0..1", &depth);
  parser.AddInt("seed", "passkey seed", &seed);
  parser.AddInt("answer-tokens", "tokens decoded per mode (timed)", &answer_tokens);
  parser.AddInt("threads", "CPU threads", &threads);
  parser.AddInt("page-tokens", "tokens per KV page", &page_tokens);
  hot_layers.Add(parser);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_flag);
  parser.AddBool("json", "print one JSON array of rows: mode, kib_per_token, compression_vs_bf16, answer, correct, "
                 "decode_tok_per_s", &json);
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  if (answer_tokens < 1) return ReportError(command, Status::InvalidArgument("--answer-tokens must be >= 1"));

  ProgressLine progress("run", ProgressModeFrom(progress_flag));
  progress.Update("loading " + model_path);
  std::unique_ptr<LlamaModel> model;
  Status s = LoadModel(model_path, &model);
  if (!s.ok()) return ReportError(command, s);
  const Tokenizer& tok = model->tokenizer();
  PasskeyCase pcase;
  s = BuildPasskeyCase(tok, context_tokens, depth, uint64_t(seed), &pcase);
  if (!s.ok()) return ReportError(command, s);

  std::vector<std::unique_ptr<InferenceSession>> sessions;
  std::vector<InferenceSession*> raw;
  for (KvMode mode : kAllPagedKvModes) {
    SessionOptions o;
    o.mode = mode;
    o.num_threads = threads;
    o.page_tokens = page_tokens;
    hot_layers.Apply(&o);
    s = SessionCapacity(pcase.prompt_ids.size(), answer_tokens, "--answer-tokens", &o.max_tokens);
    if (!s.ok()) return ReportError(command, s);
    std::unique_ptr<InferenceSession> session;
    s = InferenceSession::Create(model.get(), o, &session);
    if (!s.ok()) return ReportError(command, s);
    raw.push_back(session.get());
    sessions.push_back(std::move(session));
  }
  using Clock = std::chrono::steady_clock;
  progress.Update("prefill " + std::to_string(pcase.prompt_ids.size()) + " tokens (once, into " +
                  std::to_string(raw.size()) + " caches)");
  std::vector<float> prefill_logits;
  const auto p0 = Clock::now();
  s = InferenceSession::PrefillShared(raw, pcase.prompt_ids, &prefill_logits);
  if (!s.ok()) return ReportError(command, s);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - p0).count();

  struct Row {
    std::string mode, answer;
    double kib_per_token = 0, compression = 0, decode_tps = 0;
    bool correct = false;
  };
  std::vector<Row> rows;
  for (InferenceSession* session : raw) {
    Row row;
    row.mode = std::string(KvModeName(session->options().mode));
    progress.Update("decode " + row.mode);
    std::vector<float> logits = prefill_logits;
    std::vector<int32_t> answer_ids;
    bool ended = false;
    int32_t next = ArgMax(logits);
    const auto d0 = Clock::now();
    for (int i = 0; i < answer_tokens; ++i) {
      if (tok.IsEndOfGeneration(next)) ended = true;
      if (!ended) answer_ids.push_back(next);
      s = session->Forward({&next, 1}, false, &logits);  // timed steps: every mode decodes the same count
      if (!s.ok()) return ReportError(command, s);
      next = ArgMax(logits);
    }
    const double decode_s = std::chrono::duration<double>(Clock::now() - d0).count();
    row.answer = tok.DecodeAll(answer_ids);
    row.correct = FirstDigits(row.answer) == pcase.passkey;
    row.decode_tps = double(answer_tokens) / decode_s;
    const KvAccounting acc = session->Accounting();
    row.kib_per_token = acc.bytes_per_live_token / 1024.0;
    row.compression = acc.compression_vs_bf16;
    rows.push_back(row);
  }
  progress.Finish();

  if (json) {
    JsonValue arr = JsonValue::Array();
    for (const Row& r : rows) {
      JsonValue o = JsonValue::Object();
      o.Set("mode", r.mode);
      o.Set("kib_per_token", r.kib_per_token);
      o.Set("compression_vs_bf16", r.compression);
      o.Set("answer", r.answer);
      o.Set("correct", r.correct);
      o.Set("decode_tok_per_s", r.decode_tps);
      o.Set("passkey", pcase.passkey);
      o.Set("context_tokens", int64_t(pcase.prompt_ids.size()));
      o.Set("prefill_tok_per_s", double(pcase.prompt_ids.size()) / prefill_s);  // the shared prefill, once for all
      arr.Append(o);
    }
    PrintJson(arr);
    return kExitOk;
  }
  const LlamaConfig& c = model->config();
  std::printf("model %s: %d layers, %d query / %d KV heads, head_dim %d\n", c.name.c_str(), c.num_layers,
              c.num_q_heads, c.num_kv_heads, c.head_dim);
  std::printf("passkey prompt: %zu tokens, needle at token %lld (depth %.2f), passkey %s; prefill once %.1f s "
              "(%.0f tok/s), %d threads\n\n",
              pcase.prompt_ids.size(), (long long)pcase.needle_token, depth, pcase.passkey.c_str(), prefill_s,
              double(pcase.prompt_ids.size()) / prefill_s, threads);
  std::printf("%-8s %14s %12s  %-24s %-8s %12s\n", "mode", "KiB/token", "vs BF16", "answer", "correct", "decode tok/s");
  for (const Row& r : rows) {
    std::string shown = r.answer;
    for (char& ch : shown) if (ch == '\n') ch = ' ';
    if (shown.size() > 24) shown = shown.substr(0, 21) + "...";
    std::printf("%-8s %14.2f %11.2fx  %-24s %-8s %12.1f\n", r.mode.c_str(), r.kib_per_token, r.compression,
                ("\"" + shown + "\"").c_str(), r.correct ? "yes" : "NO", r.decode_tps);
  }
  std::printf("\nKiB/token: exact cache bytes per live token (codes, scales, page slack, block tables) over all %d "
              "layers;\nminima keeps the first %d and last %d tokens in FP8 pages, the rest TQ3; tq3 keeps only "
              "the anchors in FP8.\n",
              c.num_layers, kRecommendedAnchorTokens, kRecommendedRecentTokens);
  return kExitOk;
}

}  // namespace minimakv::cli
