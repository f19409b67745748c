// Making a KvCapture (kv_capture.h) from a real model on the CPU runtime: prefill a prompt in one chunk, then
// decode a few tokens greedily, recording the chosen layers' post-RoPE K, V and queries through
// SessionOptions::qkv_observer.
//
// The prompt is prefilled as ONE chunk, so its K/V are the model's full-precision K/V whatever the session's KV
// mode (a single chunk attends only inside itself). The decode steps after it read the cache of `mode`, so their
// queries (and the few K/V they add) depend on it: minima by default, the configuration the kernels serve.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "minimakv/inference_session.h"
#include "minimakv/kv_capture.h"
#include "minimakv/llama_model.h"
#include "minimakv/status.h"

namespace minimakv {

struct KvCaptureOptions {
  std::vector<int> layers;        // model layers to capture; sorted and de-duplicated by the call
  int num_queries = 4;            // decode steps recorded after the prompt, 1..kKvCaptureMaxQueries
  KvCaptureDtype kv_dtype = KvCaptureDtype::kBf16;
  KvMode mode = KvMode::kMinima;  // the session's KV mode for the decode steps (any paged mode)
  int num_threads = 2;
  int page_tokens = 64;
  int anchor_tokens = 256;        // recorded in the capture as the Minima mix's policy (and used by the session)
  int recent_tokens = 1024;
  std::string note;               // stored in the capture (where it came from)
  // Optional: called after each layer of the prefill (layer, num_layers) and after each decode step
  // (num_layers + step): for progress lines.
  std::function<void(int done, int total)> on_progress;
};

// Runs the model over `prompt` (>= 2 tokens) and num_queries decode steps. The capture holds prompt.size() +
// num_queries tokens per layer; query i is the query of decode step i. *generated (optional) receives the greedy
// tokens: generated[i] is the token fed at step i (the argmax after the prompt, then after each step).
// InvalidArgument naming a bad layer, count or prompt; errors of the model run as they come.
Status CaptureModelKv(const LlamaModel& model, std::span<const int32_t> prompt, const KvCaptureOptions& options,
                      KvCapture* out, std::vector<int32_t>* generated = nullptr);

}  // namespace minimakv
