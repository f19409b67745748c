// LlamaModel: the weights and hyper-parameters of a Llama-family GGUF model, plus its tokenizer:
//   general.architecture "llama": SmolLM, SmolLM2, Llama 2, TinyLlama, Llama 3, Llama 3.1+ (rope_freqs.weight);
//   general.architecture "qwen2": Qwen2 / Qwen2.5 (the Llama block plus q/k/v biases, NEOX RoPE).
// Inference runs in InferenceSession (inference_session.h).
//
// GGUF conventions this relies on (llama.cpp's convert_hf_to_gguf.py, LlamaModel / Qwen2Model):
//   - hyper-parameters are keyed by the architecture name: "<arch>.block_count", "<arch>.rope.freq_base", ...
//   - llama: attn_q / attn_k rows are permuted at conversion so that RoPE rotates ADJACENT pairs (x[2i], x[2i+1])
//     ("normal" rope in llama.cpp), not the two halves of HF's rotate_half.
//   - qwen2: no permutation, so RoPE rotates the pairs (x[i], x[i + rope_dims/2]) (llama.cpp LLAMA_ROPE_TYPE_NEOX,
//     which llama-model.cpp's llama_model_rope_type gives LLM_ARCH_QWEN2); blk.N.attn_{q,k,v}.bias are added
//     after the q/k/v matmuls.
//   - ggml dims[0] is the input dimension: a weight [in, out] in GGUF order is `out` rows of `in` values.
//   - no output.weight means tied embeddings: logits use token_embd.weight.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/status.h"
#include "minimakv/tokenizer.h"

namespace minimakv {

struct LlamaConfig {
  std::string architecture;    // general.architecture: "llama" or "qwen2"; the "llama." keys below use it
  std::string name;            // general.name
  int num_layers = 0;          // llama.block_count
  int embedding_dim = 0;       // llama.embedding_length
  int ffn_dim = 0;             // llama.feed_forward_length
  int num_q_heads = 0;         // llama.attention.head_count
  int num_kv_heads = 0;        // llama.attention.head_count_kv
  int head_dim = 0;            // embedding_dim / num_q_heads
  int vocab_size = 0;
  int context_length = 0;      // llama.context_length (trained context)
  float rope_freq_base = 10000.0f;  // llama.rope.freq_base
  std::vector<float> rope_freq_factors;  // tensor rope_freqs.weight (Llama 3.1+): pair i turns by theta_i / factor_i;
                                         // empty = none
  int rope_dims = 0;           // llama.rope.dimension_count (default head_dim)
  float rms_norm_eps = 1e-5f;  // llama.attention.layer_norm_rms_epsilon
  bool tied_embeddings = false;
  bool rope_neox = false;      // rotate (x[i], x[i + rope_dims/2]) instead of (x[2i], x[2i+1]); qwen2
  bool qkv_bias = false;       // layers carry attn_{q,k,v}.bias (qwen2 always; llama when blk.0 has them)
};

struct WeightMatrix;  // runtime/quant_matmul.h

// How K-quant weight matrices (Q4_K, Q5_K, Q6_K: the matmul has no kernel for them) are held in memory.
enum class KQuantWeights {
  kFp32,           // dequantized to fp32 at load: exact weights, 4 bytes per weight, fp32 dot products
  kRequantQ8_0,    // K-quants dequantized then re-quantized to Q8_0 (32-blocks, fp16 scale amax/127) at load:
                   // 1.0625 bytes per weight and the int8 (VNNI) matmul; adds < amax/254 per weight
};

struct LlamaLoadOptions {
  // Default: $MINIMAKV_KQUANT_WEIGHTS ("fp32" or "q8_0") when set, else kRequantQ8_0. Measured on Qwen2.5-Coder-1.5B
  // Q4_K_M, 2 shared cores (`minimakv generate`, 37-token prompt, bf16 KV): kFp32 8.1 GB resident, prefill 2.0 and
  // decode 0.80 tok/s; kRequantQ8_0 4.9 GB resident, prefill 10.9 and decode 1.58 tok/s, ~38 s load.
  KQuantWeights kquant_weights = DefaultKQuantWeights();
  static KQuantWeights DefaultKQuantWeights();
};

class LlamaModel {
 public:
  ~LlamaModel();
  // Opens and validates a GGUF file: architecture "llama" or "qwen2", shapes consistent with the hyper-parameters,
  // supported weight types. NotFound / Corruption / Unsupported naming the bad key or tensor.
  static Status Load(const std::string& path, std::unique_ptr<LlamaModel>* out);
  static Status Load(const std::string& path, const LlamaLoadOptions& options, std::unique_ptr<LlamaModel>* out);

  const LlamaConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  // Bytes of weight data the forward pass reads per token (as stored: quantized where kept quantized).
  size_t weight_bytes() const { return weight_bytes_; }

  struct Layer;
  const Layer& layer(int i) const { return *layers_[size_t(i)]; }
  // Per layer, the largest |attn_k.bias| (0 for every layer of a model without qkv biases).
  std::vector<float> MaxAbsKeyBias() const;
  const WeightMatrix& token_embedding() const { return *token_embd_; }
  const WeightMatrix& output() const { return tied() ? *token_embd_ : *output_; }
  const std::vector<float>& output_norm() const { return output_norm_; }

 private:
  LlamaModel() = default;
  bool tied() const { return output_ == nullptr; }

  LlamaConfig config_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::unique_ptr<WeightMatrix> token_embd_;
  std::unique_ptr<WeightMatrix> output_;
  std::vector<float> output_norm_;
  std::vector<std::vector<uint8_t>> requantized_;  // Q8_0 copies of K-quant matrices (kRequantQ8_0)
  size_t weight_bytes_ = 0;
};

// Layers whose keys carry a per-layer bias so large that per-token codes lose the per-token part: a component
// every token of the layer shares dominates each key, and the per-vector scale (TQ3's norm, FP8's max) is spent on
// it. A layer is an outlier when its largest |attn_k.bias| exceeds kKeyBiasOutlierFactor times the (lower) median
// over the layers and kKeyBiasOutlierMin. Qwen2.5-Coder-1.5B: layers 0, 1, 7 and 15 (largest biases 354, 111, 43,
// 46 against a median of 5; on its real K/V these are the layers where TQ3 fails, layer 15 with a head at cosine
// 0.01: docs/BENCHMARKS.md section 5). Empty for a model without biases. InferenceSession stores these layers in
// BF16 (CacheConfig::bf16_layers) unless told not to (SessionOptions::auto_hot_layers): FP8 loses them too (KL
// divergence ~2.5 nats against bf16 with them in FP8, 0.0024 with them in BF16; session 20).
inline constexpr float kKeyBiasOutlierFactor = 4.0f;
inline constexpr float kKeyBiasOutlierMin = 32.0f;
std::vector<int> KeyBiasOutlierLayers(std::span<const float> max_abs_key_bias);

}  // namespace minimakv
