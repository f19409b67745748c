#include "minimakv/kv_capture_model.h"

#include <algorithm>
#include <cmath>

#include "minimakv/hadamard_rotation.h"
#include "minimakv/sampler.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {

Status CaptureModelKv(const LlamaModel& model, std::span<const int32_t> prompt, const KvCaptureOptions& options,
                      KvCapture* out, std::vector<int32_t>* generated) {
  const LlamaConfig& config = model.config();
  std::vector<int> layers = options.layers;
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  if (layers.empty()) return Status::InvalidArgument("capture: no layer to capture");
  for (int layer : layers) {
    if (layer < 0 || layer >= config.num_layers) {
      return Status::InvalidArgument("capture: layer " + std::to_string(layer) + " not in [0, " +
                                     std::to_string(config.num_layers) + ") of the model");
    }
  }
  if (options.num_queries < 1 || options.num_queries > kKvCaptureMaxQueries) {
    return Status::InvalidArgument("capture: num_queries " + std::to_string(options.num_queries) + " not in [1, " +
                                   std::to_string(kKvCaptureMaxQueries) + "]");
  }
  if (prompt.size() < 2) return Status::InvalidArgument("capture: the prompt needs at least 2 tokens");
  if (options.mode == KvMode::kDense) {
    return Status::InvalidArgument("capture: the dense mode rounds K/V to fp16; use a paged mode (minima, tq3, fp8, bf16)");
  }
  const int64_t total_tokens = int64_t(prompt.size()) + options.num_queries;
  if (total_tokens > kKvCaptureMaxTokens) {
    return Status::InvalidArgument("capture: " + std::to_string(total_tokens) + " tokens exceed 2^24");
  }

  KvCapture c;
  c.kv_dtype = options.kv_dtype;
  c.num_q_heads = config.num_q_heads;
  c.kv_heads = config.num_kv_heads;
  c.head_dim = config.head_dim;
  c.page_tokens = options.page_tokens;
  c.sm_scale = 1.0f / std::sqrt(float(config.head_dim));  // the runtime's softmax scale (inference_session.cpp)
  c.anchor_tokens = options.anchor_tokens;
  c.recent_tokens = options.recent_tokens;
  c.tokens = total_tokens;
  c.rotation_seed = HadamardRotation::kDefaultSeed;  // what every InferenceSession cache uses (CacheConfig default)
  c.num_queries = options.num_queries;
  c.model_layers = config.num_layers;
  c.note = options.note;
  const size_t kv_row = size_t(c.kv_heads) * size_t(c.head_dim), q_row = size_t(c.num_q_heads) * size_t(c.head_dim);
  // slot_of[layer] = index into c.layers, -1 when not captured.
  std::vector<int> slot_of(size_t(config.num_layers), -1);
  for (size_t i = 0; i < layers.size(); ++i) {
    KvCaptureLayer l;
    l.layer = layers[i];
    l.k.resize(size_t(total_tokens) * kv_row);
    l.v.resize(l.k.size());
    l.q.resize(size_t(c.num_queries) * q_row);
    c.layers.push_back(std::move(l));
    slot_of[size_t(layers[i])] = int(i);
  }
  // The shape must be one the file format holds (head_dim 64 / 128 / 256, head counts, page size): checked now,
  // on the zero-filled layers, rather than after the whole model run.
  MINIMAKV_RETURN_IF_ERROR(ValidateKvCapture(c));

  const int64_t prompt_tokens = int64_t(prompt.size());
  const int total_steps = config.num_layers + options.num_queries;
  bool in_prefill = true;
  SessionOptions so;
  so.mode = options.mode;
  so.num_threads = options.num_threads;
  so.max_tokens = int(total_tokens);
  so.page_tokens = options.page_tokens;
  so.anchor_tokens = options.anchor_tokens;
  so.recent_tokens = options.recent_tokens;
  const bool round_bf16 = options.kv_dtype == KvCaptureDtype::kBf16;
  so.qkv_observer = [&](const LayerQkv& seen) {
    if (in_prefill && options.on_progress) options.on_progress(seen.layer + 1, total_steps);
    const int slot = slot_of[size_t(seen.layer)];
    if (slot < 0) return;
    KvCaptureLayer& l = c.layers[size_t(slot)];
    const size_t values = size_t(seen.tokens) * kv_row, at = size_t(seen.first_position) * kv_row;
    for (size_t i = 0; i < values; ++i) {
      // A bf16 capture stores what its file can carry: the dense reference and the pages both start from it.
      l.k[at + i] = round_bf16 ? Bf16ToFloat(FloatToBf16(seen.k[i])) : seen.k[i];
      l.v[at + i] = round_bf16 ? Bf16ToFloat(FloatToBf16(seen.v[i])) : seen.v[i];
    }
    if (seen.first_position >= prompt_tokens) {  // a decode step: its query is one of the capture's queries
      const size_t query = size_t(seen.first_position - prompt_tokens);
      std::copy(seen.q, seen.q + q_row, l.q.begin() + std::ptrdiff_t(query * q_row));
    }
  };
  std::unique_ptr<InferenceSession> session;
  MINIMAKV_RETURN_IF_ERROR(InferenceSession::Create(&model, so, &session));
  std::vector<float> logits;
  MINIMAKV_RETURN_IF_ERROR(session->Forward(prompt, false, &logits));
  in_prefill = false;
  if (generated != nullptr) generated->clear();
  for (int step = 0; step < options.num_queries; ++step) {
    const int32_t next = ArgMax(logits);
    if (generated != nullptr) generated->push_back(next);
    MINIMAKV_RETURN_IF_ERROR(session->Forward({&next, 1}, false, &logits));
    if (options.on_progress) options.on_progress(config.num_layers + step + 1, total_steps);
  }
  MINIMAKV_RETURN_IF_ERROR(ValidateKvCapture(c));
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace minimakv
