// LlamaModel: the weights and hyper-parameters of a Llama-architecture GGUF model (SmolLM, SmolLM2, Llama 2,
// TinyLlama), plus its tokenizer. Inference runs in InferenceSession (inference_session.h).
//
// GGUF conventions this relies on (llama.cpp's convert_hf_to_gguf.py, LlamaModel):
//   - attn_q / attn_k rows are permuted at conversion so that RoPE rotates ADJACENT pairs (x[2i], x[2i+1])
//     ("normal" rope in llama.cpp), not the two halves of HF's rotate_half.
//   - ggml dims[0] is the input dimension: a weight [in, out] in GGUF order is `out` rows of `in` values.
//   - no output.weight means tied embeddings: logits use token_embd.weight.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/status.h"
#include "minimakv/tokenizer.h"

namespace minimakv {

struct LlamaConfig {
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
  int rope_dims = 0;           // llama.rope.dimension_count (default head_dim)
  float rms_norm_eps = 1e-5f;  // llama.attention.layer_norm_rms_epsilon
  bool tied_embeddings = false;
};

struct WeightMatrix;  // runtime/quant_matmul.h

class LlamaModel {
 public:
  ~LlamaModel();
  // Opens and validates a GGUF file: architecture "llama", shapes consistent with the hyper-parameters,
  // supported weight types. NotFound / Corruption / Unsupported naming the bad key or tensor.
  static Status Load(const std::string& path, std::unique_ptr<LlamaModel>* out);

  const LlamaConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  // Bytes of weight data the forward pass reads per token (as stored: quantized where kept quantized).
  size_t weight_bytes() const { return weight_bytes_; }

  struct Layer;
  const Layer& layer(int i) const { return *layers_[size_t(i)]; }
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
  size_t weight_bytes_ = 0;
};

}  // namespace minimakv
