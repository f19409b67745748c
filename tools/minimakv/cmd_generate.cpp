// minimakv generate: free-form text generation with the CPU runtime (any KV mode).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/inference_session.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/sampler.h"

namespace minimakv::cli {

int RunGenerateCommand(const std::vector<std::string>& args) {
  const std::string command = "minimakv generate";
  std::string model_path = DefaultModelPath();
  std::string prompt = "Write a haiku about memory.";
  std::string mode_name = "minima";
  int max_new_tokens = 64, threads = 2;
  double temperature = 0.0, top_p = 1.0;
  int64_t seed = 0;
  bool raw = false, json = false, show_ids = false;
  ArgParser parser(command,
                   "Generates text from a prompt on the CPU with the KV cache in the chosen mode. The prompt goes\n"
                   "through the model's chat template unless --raw.");
  parser.AddString("model", "PATH", "GGUF model (default: scripts/fetch_model.sh's SmolLM2-135M-Instruct)", &model_path);
  parser.AddString("prompt", "TEXT", "the user message (or raw text with --raw)", &prompt);
  parser.AddChoice("kv", {"dense", "bf16", "fp8", "tq3", "minima"}, "KV cache mode", &mode_name);
  parser.AddInt("max-tokens", "tokens to generate at most", &max_new_tokens);
  parser.AddDouble("temperature", "0 = greedy", &temperature);
  parser.AddDouble("top-p", "nucleus sampling mass", &top_p);
  parser.AddInt("seed", "sampling seed", &seed);
  parser.AddInt("threads", "CPU threads", &threads);
  HotLayerFlags hot_layers;
  hot_layers.Add(parser);
  parser.AddBool("raw", "feed the prompt as is (no chat template)", &raw);
  parser.AddBool("ids", "also print the generated token ids", &show_ids);
  parser.AddBool("json", "print one JSON object: prompt_tokens, ids, text, prefill/decode tokens per second", &json);
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;

  std::unique_ptr<LlamaModel> model;
  Status s = LlamaModel::Load(model_path, &model);
  if (!s.ok()) return ReportError(command, s);
  const Tokenizer& tok = model->tokenizer();
  std::string text = prompt;
  if (!raw) {
    s = tok.ApplyChatTemplate({{"user", prompt}}, true, &text);
    if (!s.ok()) return ReportError(command, s);
  }
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  tok.Encode(text, /*parse_special=*/!raw, &ids);

  SessionOptions options;
  s = ParseKvMode(mode_name, &options.mode);
  if (!s.ok()) return ReportError(command, s);
  options.num_threads = threads;
  hot_layers.Apply(&options);
  s = SessionCapacity(ids.size(), max_new_tokens, "--max-tokens", &options.max_tokens);
  if (!s.ok()) return ReportError(command, s);
  std::unique_ptr<InferenceSession> session;
  s = InferenceSession::Create(model.get(), options, &session);
  if (!s.ok()) return ReportError(command, s);
  Sampler sampler;
  s = Sampler::Create({float(temperature), float(top_p), uint64_t(seed)}, &sampler);
  if (!s.ok()) return ReportError(command, s);

  using Clock = std::chrono::steady_clock;
  std::vector<float> logits;
  const auto t0 = Clock::now();
  s = session->Forward(ids, false, &logits);
  if (!s.ok()) return ReportError(command, s);
  const auto t1 = Clock::now();
  std::vector<int32_t> out_ids;
  std::string out_text;
  for (int i = 0; i < max_new_tokens; ++i) {
    const int32_t next = sampler.Sample(logits);
    if (tok.IsEndOfGeneration(next)) break;
    out_ids.push_back(next);
    const std::string piece = tok.Decode(next);
    out_text += piece;
    if (!json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 == max_new_tokens) break;
    s = session->Forward({&next, 1}, false, &logits);
    if (!s.ok()) return ReportError(command, s);
  }
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const double decode_tps = out_ids.size() > 1 ? double(out_ids.size() - 1) / decode_s : 0.0;
  if (json) {
    JsonValue o = JsonValue::Object();
    o.Set("kv", mode_name);
    o.Set("prompt_tokens", int64_t(ids.size()));
    JsonValue arr = JsonValue::Array();
    for (int32_t id : out_ids) arr.Append(int64_t(id));
    o.Set("ids", arr);
    o.Set("text", out_text);
    o.Set("prefill_tok_per_s", double(ids.size()) / prefill_s);
    o.Set("decode_tok_per_s", decode_tps);
    PrintJson(o);
  } else {
    std::printf("\n");
    if (show_ids) {
      for (int32_t id : out_ids) std::printf("%d ", id);
      std::printf("\n");
    }
    std::fprintf(stderr, "[%s] prompt %zu tokens, prefill %.1f tok/s, decode %.1f tok/s\n", mode_name.c_str(),
                 ids.size(), double(ids.size()) / prefill_s, decode_tps);
  }
  return kExitOk;
}

}  // namespace minimakv::cli
