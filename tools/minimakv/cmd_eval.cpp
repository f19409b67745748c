// minimakv eval niah | kld | capture-kv: quality of the KV modes on a real model, and real K/V for kernel checks.
//   niah  passkey retrieval grid (contexts x depths x seeds); each case is prefilled once into one cache per
//         mode, then each mode decodes its answer greedily. Rows: mode, context, accuracy, agreement_with_bf16,
//         cases.
//   kld   a long English text in windows; each window is fed in chunks so later chunks attend to earlier ones
//         THROUGH each mode's cache (a single-chunk prefill would attend on full-precision K/V everywhere).
//         Per mode: mean KL(p_bf16 || p_mode) of the next-token distributions, top-1 agreement with bf16,
//         perplexity of the text, and the cache's bits per stored K/V value.
//   capture-kv  a passkey prompt prefilled in one chunk, then a few greedy decode steps; the chosen layers' K, V
//         and decode queries written to a KV capture file (kv_capture.h) for tests/kernels/cuda/real_kv_check.cu.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "minimakv/inference_session.h"
#include "minimakv/kv_capture.h"
#include "minimakv/kv_capture_model.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/passkey_task.h"
#include "minimakv/sampler.h"

namespace minimakv::cli {
namespace {

// Debian's base-files package ships these on every Debian/Ubuntu machine: six license texts, ~130 KB of plain
// English, about 28K tokens for SmolLM2's tokenizer: three windows of 8K tokens. They are read in this order and
// joined by a blank line (scripts/llama_cpp_kv_reference.py reads the same list the same way).
constexpr const char* kDefaultKldText =
    "/usr/share/common-licenses/GPL-3,/usr/share/common-licenses/GPL-2,/usr/share/common-licenses/LGPL-2.1,"
    "/usr/share/common-licenses/GFDL-1.3,/usr/share/common-licenses/MPL-2.0,/usr/share/common-licenses/Apache-2.0";

// Reads the comma-separated files of `paths` and joins them with a blank line.
Status ReadTextFiles(const std::string& paths, std::string* text) {
  text->clear();
  std::stringstream list(paths);
  std::string path;
  while (std::getline(list, path, ',')) {
    if (path.empty()) continue;
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::NotFound("cannot read --text file '" + path + "'");
    std::stringstream buffer;
    buffer << in.rdbuf();
    if (!text->empty()) *text += "\n\n";
    *text += buffer.str();
  }
  if (text->empty()) return Status::InvalidArgument("--text '" + paths + "' names no readable text");
  return Status::Ok();
}

Status MakeSessions(const LlamaModel* model, int max_tokens, int threads, const HotLayerFlags& hot_layers,
                    std::vector<std::unique_ptr<InferenceSession>>* sessions) {
  sessions->clear();
  for (KvMode mode : kAllPagedKvModes) {
    SessionOptions o;
    o.mode = mode;
    o.num_threads = threads;
    o.max_tokens = max_tokens;
    hot_layers.Apply(&o);
    std::unique_ptr<InferenceSession> s;
    MINIMAKV_RETURN_IF_ERROR(InferenceSession::Create(model, o, &s));
    sessions->push_back(std::move(s));
  }
  return Status::Ok();
}

// The passkey seed of one grid case: distinct for every (context index, depth, seed).
uint64_t NiahSeed(size_t context_index, int64_t depth_percent, int seed) {
  return uint64_t(1000 * context_index) + uint64_t(100 * depth_percent) + uint64_t(seed);
}

Status DumpPasskeyCases(const Tokenizer& tok, const std::vector<int64_t>& contexts,
                        const std::vector<int64_t>& depth_percents, int seeds, const std::string& path) {
  std::ofstream out(path);
  if (!out) return Status::NotFound("cannot write --dump-cases '" + path + "'");
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    for (int64_t depth : depth_percents) {
      for (int seed = 0; seed < seeds; ++seed) {
        PasskeyCase pc;
        MINIMAKV_RETURN_IF_ERROR(BuildPasskeyCase(tok, contexts[ci], double(depth) / 100.0, NiahSeed(ci, depth, seed), &pc));
        JsonValue ids = JsonValue::Array();
        for (int32_t id : pc.prompt_ids) ids.Append(int64_t(id));
        JsonValue o = JsonValue::Object();
        o.Set("context", contexts[ci]);
        o.Set("depth_percent", depth);
        o.Set("seed", int64_t(seed));
        o.Set("passkey", pc.passkey);
        o.Set("prompt_ids", ids);
        out << o.Dump() << "\n";
      }
    }
  }
  out.flush();
  if (!out) return Status::ResourceExhausted("failed writing --dump-cases '" + path + "'");
  return Status::Ok();
}

int RunNiah(const std::vector<std::string>& args) {
  const std::string command = "minimakv eval niah";
  std::string model_path = DefaultModelPath();
  std::vector<int64_t> contexts = {2048, 4096, 8192};
  std::vector<int64_t> depth_percents = {10, 20, 30, 40, 50, 60, 70, 80, 90};
  int seeds = 10, threads = 2, answer_tokens = 8;
  HotLayerFlags hot_layers;
  bool json = false;
  std::string progress_flag = "auto", dump_cases_path, answers_path;
  ArgParser parser(command,
                   "Passkey retrieval grid: for each context, depth and seed, one prompt prefilled once into a cache per\n"
                   "mode (bf16, fp8, tq3, minima); each mode decodes its answer greedily. Accuracy = the first digits of\n"
                   "the answer equal the passkey; agreement = the same digits as the bf16 control.");
  parser.AddString("model", "PATH", "GGUF model", &model_path);
  parser.AddIntList("contexts", "prompt lengths in tokens", &contexts);
  parser.AddIntList("depths", "needle depths in percent of the filler", &depth_percents);
  parser.AddInt("seeds", "passkeys per (context, depth)", &seeds);
  parser.AddInt("answer-tokens", "tokens decoded per answer at most", &answer_tokens);
  parser.AddInt("threads", "CPU threads", &threads);
  hot_layers.Add(parser);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_flag);
  parser.AddBool("json", "print a JSON array of rows: mode, context, accuracy, agreement_with_bf16, cases", &json);
  parser.AddString("dump-cases", "PATH",
                   "only write the grid's prompts as JSON lines (context, depth_percent, seed, passkey, prompt_ids) for\n"
                   "another engine (scripts/llama_cpp_kv_reference.py --cases PATH), then exit",
                   &dump_cases_path);
  parser.AddString("answers-out", "PATH",
                   "also write one JSON line per case (context, depth_percent, seed, passkey, and each mode's answer\n"
                   "digits) for per-depth tables and plots",
                   &answers_path);
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  // Checked before the model loads: zero cases would print a table of zeros and exit 0.
  if (seeds < 1) {
    return ReportError(command, Status::InvalidArgument("--seeds " + std::to_string(seeds) + " must be >= 1"));
  }

  std::unique_ptr<LlamaModel> model;
  Status s = LoadModel(model_path, &model);
  if (!s.ok()) return ReportError(command, s);
  const Tokenizer& tok = model->tokenizer();
  if (!dump_cases_path.empty()) {
    s = DumpPasskeyCases(tok, contexts, depth_percents, seeds, dump_cases_path);
    return s.ok() ? kExitOk : ReportError(command, s);
  }
  std::ofstream answers_out;
  if (!answers_path.empty()) {
    answers_out.open(answers_path);
    if (!answers_out) return ReportError(command, Status::NotFound("cannot write --answers-out '" + answers_path + "'"));
  }
  constexpr int kModes = int(std::size(kAllPagedKvModes));
  struct Tally {
    int cases = 0, correct = 0, agree = 0;
  };
  std::vector<std::vector<Tally>> tally(contexts.size(), std::vector<Tally>(kModes));
  ProgressLine progress("eval niah", ProgressModeFrom(progress_flag));
  const double total_cases = double(contexts.size() * depth_percents.size()) * seeds;
  int done = 0;
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    for (int64_t depth : depth_percents) {
      for (int seed = 0; seed < seeds; ++seed) {
        PasskeyCase pc;
        s = BuildPasskeyCase(tok, contexts[ci], double(depth) / 100.0, NiahSeed(ci, depth, seed), &pc);
        if (!s.ok()) return ReportError(command, s);
        std::vector<std::unique_ptr<InferenceSession>> sessions;
        int max_tokens = 0;
        s = SessionCapacity(pc.prompt_ids.size(), answer_tokens, "--answer-tokens", &max_tokens);
        if (!s.ok()) return ReportError(command, s);
        s = MakeSessions(model.get(), max_tokens, threads, hot_layers, &sessions);
        if (!s.ok()) return ReportError(command, s);
        std::vector<InferenceSession*> raw;
        for (auto& x : sessions) raw.push_back(x.get());
        progress.Update(done / total_cases, "context " + std::to_string(contexts[ci]) + " depth " +
                                                std::to_string(depth) + "% seed " + std::to_string(seed));
        std::vector<float> prefill_logits;
        s = InferenceSession::PrefillShared(raw, pc.prompt_ids, &prefill_logits);
        if (!s.ok()) return ReportError(command, s);
        std::string bf16_digits;
        JsonValue case_row = JsonValue::Object();
        case_row.Set("context", contexts[ci]);
        case_row.Set("depth_percent", depth);
        case_row.Set("seed", int64_t(seed));
        case_row.Set("passkey", pc.passkey);
        for (int m = 0; m < kModes; ++m) {
          std::vector<float> logits = prefill_logits;
          std::vector<int32_t> answer;
          for (int i = 0; i < answer_tokens; ++i) {
            const int32_t next = ArgMax(logits);
            if (tok.IsEndOfGeneration(next)) break;
            answer.push_back(next);
            if (i + 1 == answer_tokens) break;
            s = raw[size_t(m)]->Forward({&next, 1}, false, &logits);
            if (!s.ok()) return ReportError(command, s);
          }
          const std::string digits = FirstDigits(tok.DecodeAll(answer));
          if (m == 0) bf16_digits = digits;
          Tally& t = tally[ci][size_t(m)];
          ++t.cases;
          t.correct += digits == pc.passkey;
          t.agree += digits == bf16_digits;
          case_row.Set(std::string(KvModeName(kAllPagedKvModes[m])), digits);
        }
        if (answers_out.is_open()) answers_out << case_row.Dump() << "\n" << std::flush;
        ++done;
      }
    }
  }
  progress.Finish();
  JsonValue rows = JsonValue::Array();
  if (!json) std::printf("%-8s %8s %10s %22s %6s\n", "mode", "context", "accuracy", "agreement_with_bf16", "cases");
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    for (int m = 0; m < kModes; ++m) {
      const Tally& t = tally[ci][size_t(m)];
      const double acc = t.cases ? double(t.correct) / t.cases : 0.0;
      const double agree = t.cases ? double(t.agree) / t.cases : 0.0;
      const std::string mode(KvModeName(kAllPagedKvModes[m]));
      if (json) {
        JsonValue o = JsonValue::Object();
        o.Set("mode", mode);
        o.Set("context", contexts[ci]);
        o.Set("accuracy", acc);
        o.Set("agreement_with_bf16", agree);
        o.Set("cases", int64_t(t.cases));
        rows.Append(o);
      } else {
        std::printf("%-8s %8lld %10.3f %22.3f %6d\n", mode.c_str(), (long long)contexts[ci], acc, agree, t.cases);
      }
    }
  }
  if (json) PrintJson(rows);
  return kExitOk;
}

// log-softmax of one row, in place into `out`.
void LogSoftmax(const float* logits, int n, std::vector<double>* out) {
  out->resize(size_t(n));
  double max_logit = -INFINITY;
  for (int i = 0; i < n; ++i) max_logit = std::max(max_logit, double(logits[i]));
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max_logit);
  const double log_z = max_logit + std::log(sum);
  for (int i = 0; i < n; ++i) (*out)[size_t(i)] = double(logits[i]) - log_z;
}

int RunKld(const std::vector<std::string>& args) {
  const std::string command = "minimakv eval kld";
  std::string model_path = DefaultModelPath();
  std::string text_path = kDefaultKldText;
  int window = 8192, chunk = 256, max_windows = 3, threads = 2;
  HotLayerFlags hot_layers;
  bool json = false;
  std::string progress_flag = "auto";
  ArgParser parser(command,
                   "KL divergence of each KV mode's next-token distributions against the bf16 control over windows of a\n"
                   "long English text, fed in chunks so that attention to earlier chunks reads each mode's cache.\n"
                   "Default text: six license texts of Debian's base-files package, /usr/share/common-licenses/{GPL-3,\n"
                   "GPL-2,LGPL-2.1,GFDL-1.3,MPL-2.0,Apache-2.0}, about 28K tokens.");
  parser.AddString("model", "PATH", "GGUF model", &model_path);
  parser.AddString("text", "PATHS", "UTF-8 text files, comma-separated, joined by a blank line", &text_path);
  parser.AddInt("window", "tokens per window (capped at the text length)", &window);
  parser.AddInt("chunk", "tokens per forward chunk", &chunk);
  parser.AddInt("windows", "windows at most", &max_windows);
  parser.AddInt("threads", "CPU threads", &threads);
  hot_layers.Add(parser);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_flag);
  parser.AddBool("json", "print a JSON array of rows: mode, bits_per_value, kld, top1_agreement, ppl, positions", &json);
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  if (window < 2 || chunk < 2) return ReportError(command, Status::InvalidArgument("--window and --chunk must be >= 2"));

  std::string text;
  Status s = ReadTextFiles(text_path, &text);
  if (!s.ok()) return ReportError(command, s);
  std::unique_ptr<LlamaModel> model;
  s = LoadModel(model_path, &model);
  if (!s.ok()) return ReportError(command, s);
  const Tokenizer& tok = model->tokenizer();
  std::vector<int32_t> ids;
  tok.Encode(text, false, &ids);
  // A window predicts its tokens from the first: one token predicts nothing (and none would divide by zero).
  if (ids.size() < 2) {
    return ReportError(command, Status::InvalidArgument("--text '" + text_path + "' gives " +
                                                        std::to_string(ids.size()) +
                                                        " tokens; kld needs at least 2"));
  }
  const int64_t win = std::min<int64_t>(window, int64_t(ids.size()));
  const int64_t windows = std::min<int64_t>(max_windows, int64_t(ids.size()) / win);
  const int vocab = model->config().vocab_size;
  constexpr int kModes = int(std::size(kAllPagedKvModes));
  struct Sums {
    double kld = 0, nll = 0;
    int64_t agree = 0, positions = 0;
    double bits_per_value = 0;
  };
  std::vector<Sums> sums(kModes);
  ProgressLine progress("eval kld", ProgressModeFrom(progress_flag));
  std::vector<double> ref_logp, logp;
  std::vector<std::vector<double>> ref_rows;
  std::vector<int32_t> ref_top;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<std::unique_ptr<InferenceSession>> sessions;
    s = MakeSessions(model.get(), int(win), threads, hot_layers, &sessions);
    if (!s.ok()) return ReportError(command, s);
    const int32_t* window_ids = ids.data() + w * win;
    for (int64_t c0 = 0; c0 < win; c0 += chunk) {
      const int64_t n = std::min<int64_t>(chunk, win - c0);
      // Positions predicted in this chunk: c0 .. c0+n-1 predict tokens c0+1 .. (the last has no target).
      for (int m = 0; m < kModes; ++m) {
        progress.Update((double(w) + double(c0) / double(win)) / double(windows),
                        "window " + std::to_string(w) + " tokens " + std::to_string(c0) + " " +
                            std::string(KvModeName(kAllPagedKvModes[m])));
        std::vector<float> logits;
        s = sessions[size_t(m)]->Forward({window_ids + c0, size_t(n)}, true, &logits);
        if (!s.ok()) return ReportError(command, s);
        if (m == 0) {
          ref_rows.assign(size_t(n), {});
          ref_top.assign(size_t(n), 0);
        }
        for (int64_t i = 0; i < n; ++i) {
          const float* row = logits.data() + i * vocab;
          const int32_t top = ArgMax({row, size_t(vocab)});
          if (m == 0) {
            LogSoftmax(row, vocab, &ref_rows[size_t(i)]);
            ref_top[size_t(i)] = top;
          }
          const int64_t pos = c0 + i;
          if (pos + 1 >= win) continue;
          const std::vector<double>& ref = ref_rows[size_t(i)];
          LogSoftmax(row, vocab, &logp);
          double kl = 0.0;
          if (m != 0) {
            for (int v = 0; v < vocab; ++v) kl += std::exp(ref[size_t(v)]) * (ref[size_t(v)] - logp[size_t(v)]);
          }
          Sums& sm = sums[size_t(m)];
          sm.kld += kl;
          sm.nll -= logp[size_t(window_ids[pos + 1])];
          sm.agree += top == ref_top[size_t(i)];
          ++sm.positions;
        }
      }
    }
    for (int m = 0; m < kModes; ++m) {
      const KvAccounting acc = sessions[size_t(m)]->Accounting();
      const double values = double(acc.stored_token_layers) * 2.0 * acc.kv_heads * acc.head_dim;
      sums[size_t(m)].bits_per_value = values > 0 ? double(acc.total_bytes) * 8.0 / values : 0.0;
    }
  }
  progress.Finish();
  JsonValue rows = JsonValue::Array();
  if (!json) {
    std::printf("text %s: %zu tokens, %lld window(s) of %lld tokens, chunks of %d\n", text_path.c_str(), ids.size(),
                (long long)windows, (long long)win, chunk);
    std::printf("%-8s %14s %12s %16s %10s\n", "mode", "bits_per_value", "kld", "top1_agreement", "ppl");
  }
  for (int m = 0; m < kModes; ++m) {
    const Sums& sm = sums[size_t(m)];
    const double positions = double(std::max<int64_t>(1, sm.positions));
    const std::string mode(KvModeName(kAllPagedKvModes[m]));
    const double kld = sm.kld / positions, agree = double(sm.agree) / positions, ppl = std::exp(sm.nll / positions);
    if (json) {
      JsonValue o = JsonValue::Object();
      o.Set("mode", mode);
      o.Set("bits_per_value", sm.bits_per_value);
      o.Set("kld", kld);
      o.Set("top1_agreement", agree);
      o.Set("ppl", ppl);
      o.Set("positions", sm.positions);
      rows.Append(o);
    } else {
      std::printf("%-8s %14.3f %12.3e %16.4f %10.4f\n", mode.c_str(), sm.bits_per_value, kld, agree, ppl);
    }
  }
  if (json) PrintJson(rows);
  return kExitOk;
}


int RunCaptureKv(const std::vector<std::string>& args) {
  const std::string command = "minimakv eval capture-kv";
  std::string model_path = DefaultModelPath();
  int64_t context = 8192;
  std::vector<int> layers = {0, 7, 15, 29};
  int queries = 4, threads = 2, depth_percent = 50, seed = 1;
  std::string dtype = "bf16", mode_name = "minima", out_path, progress_flag = "auto";
  bool json = false;
  ArgParser parser(command,
                   "Captures a real model's KV cache for kernel checks: a passkey prompt of about --context tokens is\n"
                   "prefilled in one chunk (so its K/V are the model's full-precision K/V in every KV mode), then\n"
                   "--queries tokens are decoded greedily with the cache in --mode. For each of --layers the file holds\n"
                   "the post-RoPE K and V of every token and the post-RoPE fp32 query of each decode step, with the\n"
                   "model's attention shape and the Minima-KV policy (anchors 256, recent 1024); format in\n"
                   "include/minimakv/kv_capture.h. tests/kernels/cuda/real_kv_check.cu runs the CUDA decode on it.");
  parser.AddString("model", "PATH", "GGUF model", &model_path);
  parser.AddString("out", "FILE", "capture file to write (required)", &out_path);
  parser.AddInt("context", "prompt length in tokens (the passkey prompt is at most this long)", &context);
  parser.AddIntList("layers", "model layers to capture", &layers);
  parser.AddInt("queries", "decode steps recorded after the prompt (1-64)", &queries);
  parser.AddChoice("dtype", {"bf16", "fp32"}, "how K/V are stored: bf16 (half the size) or fp32 (exact)", &dtype);
  parser.AddChoice("mode", {"minima", "tq3", "fp8", "bf16"}, "KV mode of the session for the decode steps", &mode_name);
  parser.AddInt("depth", "needle depth in percent of the filler", &depth_percent);
  parser.AddInt("seed", "passkey seed", &seed);
  parser.AddInt("threads", "CPU threads", &threads);
  parser.AddChoice("progress", kProgressChoices, kProgressHelp, &progress_flag);
  parser.AddBool("json", "print a JSON object (path, bytes, layers, tokens, queries, passkey, answer, seconds, ...)",
                 &json);
  parser.SetEpilog("Example: minimakv eval capture-kv --context 8192 --layers 0,7,15,29 --out kv8k.mkvcap\n"
                   "(SmolLM2-135M, bf16 K/V: 6.0 MB per layer for the 7,848 tokens of that capture, a 7,844-token prompt\n"
                   "and 4 decode steps; fp32 doubles it)");
  int exit_code = kExitOk;
  if (!ParseFlags(parser, args, &exit_code)) return exit_code;
  if (out_path.empty()) return ReportError(command, Status::InvalidArgument("--out FILE is required"));
  if (context < 128 || context > kKvCaptureMaxTokens / 2) {
    return ReportError(command, Status::InvalidArgument("--context " + std::to_string(context) + " not in [128, 2^23]"));
  }
  if (depth_percent < 0 || depth_percent > 100) {
    return ReportError(command, Status::InvalidArgument("--depth " + std::to_string(depth_percent) + " not in [0, 100]"));
  }
  if (threads < 1) return ReportError(command, Status::InvalidArgument("--threads must be >= 1"));
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<LlamaModel> model;
  Status s = LoadModel(model_path, &model);
  if (!s.ok()) return ReportError(command, s);
  const Tokenizer& tok = model->tokenizer();
  PasskeyCase pc;
  s = BuildPasskeyCase(tok, context, double(depth_percent) / 100.0, uint64_t(seed), &pc);
  if (!s.ok()) return ReportError(command, s);
  KvCaptureOptions options;
  options.layers = layers;
  options.num_queries = queries;
  options.kv_dtype = dtype == "fp32" ? KvCaptureDtype::kFp32 : KvCaptureDtype::kBf16;
  s = ParseKvMode(mode_name, &options.mode);
  if (!s.ok()) return ReportError(command, s);
  options.num_threads = threads;
  options.note = model->config().name + "; passkey prompt of " + std::to_string(pc.prompt_ids.size()) +
                 " tokens (depth " + std::to_string(depth_percent) + "%, seed " + std::to_string(seed) +
                 ") prefilled in one chunk; " + std::to_string(queries) + " greedy decode steps with the " + mode_name +
                 " cache";
  ProgressLine progress("eval capture-kv", ProgressModeFrom(progress_flag));
  const int num_layers = model->config().num_layers;
  options.on_progress = [&](int done, int total) {
    progress.Update(double(done) / total, done <= num_layers
                                              ? "prefill " + std::to_string(pc.prompt_ids.size()) + " tokens, layer " +
                                                    std::to_string(done) + "/" + std::to_string(num_layers)
                                              : "decode step " + std::to_string(done - num_layers));
  };
  KvCapture capture;
  std::vector<int32_t> generated;
  s = CaptureModelKv(*model, pc.prompt_ids, options, &capture, &generated);
  if (!s.ok()) return ReportError(command, s);
  progress.Update(1.0, "writing " + out_path);
  s = WriteKvCapture(capture, out_path);
  progress.Finish();
  if (!s.ok()) return ReportError(command, s);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t bytes = KvCaptureFileBytes(capture);
  const std::string answer = tok.DecodeAll(generated);
  std::string layer_list;
  JsonValue layer_array = JsonValue::Array();
  for (const KvCaptureLayer& l : capture.layers) {
    layer_list += (layer_list.empty() ? "" : ",") + std::to_string(l.layer);
    layer_array.Append(int64_t(l.layer));
  }
  if (json) {
    JsonValue o = JsonValue::Object();
    o.Set("path", out_path);
    o.Set("bytes", int64_t(bytes));
    o.Set("layers", layer_array);
    o.Set("tokens", capture.tokens);
    o.Set("prompt_tokens", int64_t(pc.prompt_ids.size()));
    o.Set("queries", int64_t(capture.num_queries));
    o.Set("dtype", dtype);
    o.Set("mode", mode_name);
    o.Set("passkey", pc.passkey);
    o.Set("answer", answer);
    o.Set("seconds", seconds);
    PrintJson(o);
  } else {
    std::printf("wrote %s: %llu bytes, layers %s, %lld tokens (prompt %zu + %d decode steps), %s K/V\n",
                out_path.c_str(), (unsigned long long)bytes, layer_list.c_str(), (long long)capture.tokens,
                pc.prompt_ids.size(), capture.num_queries, dtype.c_str());
    std::printf("passkey %s, greedy answer (%s cache) \"%s\", %.1f s\n", pc.passkey.c_str(), mode_name.c_str(),
                answer.c_str(), seconds);
  }
  return kExitOk;
}

}  // namespace

int RunEvalCommand(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf("Usage: minimakv eval niah|kld|capture-kv [flags]   (minimakv eval niah --help)\n"
                "  niah        passkey retrieval accuracy per KV mode over contexts x depths x seeds\n"
                "  kld         KL divergence vs bf16, top-1 agreement and perplexity per KV mode on long text\n"
                "  capture-kv  a real model's K/V and decode queries of chosen layers, to a file (GPU kernel checks)\n");
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "niah") return RunNiah(rest);
  if (args[0] == "kld") return RunKld(rest);
  if (args[0] == "capture-kv") return RunCaptureKv(rest);
  std::fprintf(stderr, "minimakv eval: unknown evaluation '%s' (niah, kld, capture-kv)\n", args[0].c_str());
  return kExitUsage;
}

}  // namespace minimakv::cli
