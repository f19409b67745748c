// InferenceSession: one sequence of a LlamaModel on the CPU, with its KV cache in one of the KV modes:
//   dense   fp32 K/V in plain arrays, attention by src/runtime/prompt_attention.cpp: the reference that matches
//           llama.cpp (with emulate_llama_cpp_f16: K, V, Q and attention weights rounded to fp16 as llama.cpp's
//           default f16 cache and non-flash attention path do)
//   bf16    minimakv PagedCache, hot format BF16, nothing converted (the control)
//   fp8     PagedCache, FP8 only, nothing converted
//   tq3     PagedCache FP8 -> TQ3 with recent_tokens = 0: every full page past the anchors is TQ3
//   minima  PagedCache FP8 -> TQ3 with the retention policy (recent 1024 + anchors 256 in FP8, rest TQ3)
// Paged modes attend through AttendMixedCpu (one direct kernel per format + LSE merge, no dense copy).
//
// Forward(tokens): a chunk of T tokens at positions [num_past, num_past + T).
//   T > 1 (prefill): each query attends to the cached tokens (paged kernels) merged with causal attention
//         inside the chunk on full-precision K/V; then the chunk's K/V are appended to the cache (written in
//         the hot format and converted as the policy says).
//   T = 1 (decode):  the token's K/V are appended first, then it attends over the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/kv_accounting.h"
#include "minimakv/llama_model.h"
#include "minimakv/status.h"

namespace minimakv {

enum class KvMode { kDense, kBf16, kFp8, kTq3, kMinima };
inline constexpr KvMode kAllPagedKvModes[] = {KvMode::kBf16, KvMode::kFp8, KvMode::kTq3, KvMode::kMinima};
std::string_view KvModeName(KvMode mode);
// Parses "dense", "bf16", "fp8", "tq3", "minima".
Status ParseKvMode(std::string_view name, KvMode* mode);

// One layer's projections of one Forward chunk, after RoPE (and the qwen2 biases), before the chunk's K/V enter the
// cache: positions [first_position, first_position + tokens). Row-major fp32:
//   q [tokens][num_q_heads][head_dim], k and v [tokens][kv_heads][head_dim].
// The pointers are valid only during the observer's call.
struct LayerQkv {
  int layer = 0;
  int64_t first_position = 0;
  int64_t tokens = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

struct SessionOptions {
  KvMode mode = KvMode::kBf16;
  int num_threads = 2;
  int max_tokens = 0;        // KV capacity; 0 = the model's context length
  int page_tokens = 64;
  int recent_tokens = 1024;  // minima mode
  int anchor_tokens = 256;   // minima and tq3 modes
  std::vector<int> hot_layers;   // tq3 and minima modes: layers kept FP8 (RetentionPolicy::hot_layers)
  std::vector<int> bf16_layers;  // fp8, tq3 and minima modes: layers stored BF16 (CacheConfig::bf16_layers)
  // fp8, tq3 and minima modes: also store BF16 the model's key-bias outlier layers (KeyBiasOutlierLayers in
  // llama_model.h; Qwen2.5-Coder-1.5B: 0, 1, 7, 15; none without qkv biases), whose keys even FP8 cannot
  // carry (session 20: FP8 there cost 2.5 nats of KL divergence). false = hot_layers and bf16_layers only.
  bool auto_hot_layers = true;
  bool emulate_llama_cpp_f16 = true;  // dense mode only
  // Optional: called on the calling thread for every layer of every Forward chunk (and of a shared prefill, run
  // by sessions[0]) with that layer's post-RoPE q, k, v; for capturing a real model's K/V (kv_capture_model.h).
  std::function<void(const LayerQkv&)> qkv_observer;
};

class InferenceSession {
 public:
  ~InferenceSession();
  static Status Create(const LlamaModel* model, const SessionOptions& options, std::unique_ptr<InferenceSession>* out);

  // Runs `tokens` at the next positions. logits: [T][vocab] when all_logits, else [vocab] of the last token.
  // InvalidArgument for an empty chunk, a token id outside the vocabulary, or a context past max_tokens.
  Status Forward(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits);

  // Prefills `tokens` (>= 2, positions 0..T-1) ONCE for several fresh sessions of the same model: the forward
  // pass runs in sessions[0] and every layer's K/V are also stored into the other sessions' caches (each in
  // its own mode). logits: [vocab] of the last token, shared by all. Afterwards every session decodes on its
  // own. The followers' cached K/V are exactly what a single-chunk prefill of their own would store.
  static Status PrefillShared(std::span<InferenceSession* const> sessions, std::span<const int32_t> tokens,
                              std::vector<float>* logits);

  int64_t num_past() const { return num_past_; }
  const SessionOptions& options() const { return options_; }
  // Cache accounting (paged modes). Dense mode reports fp32 bytes: 2 * layers * kv_heads * head_dim * 4.
  KvAccounting Accounting() const;
  double KvBytesPerToken() const;
  double CompressionVsBf16() const;

 private:
  struct Impl;
  InferenceSession() = default;
  Status ForwardImpl(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits,
                     std::span<InferenceSession* const> followers);
  Status StoreFollowerKv(int layer, const float* k, const float* v, int64_t tokens);
  std::unique_ptr<Impl> impl_;
  SessionOptions options_;
  int64_t num_past_ = 0;
};

}  // namespace minimakv
