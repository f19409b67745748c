// The per-layer weights of a LlamaModel (private to the runtime).
#pragma once

#include <vector>

#include "minimakv/llama_model.h"
#include "runtime/quant_matmul.h"

namespace minimakv {

struct LlamaModel::Layer {
  std::vector<float> attn_norm;  // [embedding_dim]
  std::vector<float> ffn_norm;   // [embedding_dim]
  std::vector<float> bq;         // [num_q_heads * head_dim] when config().qkv_bias, else empty
  std::vector<float> bk;         // [num_kv_heads * head_dim] when config().qkv_bias, else empty
  std::vector<float> bv;         // [num_kv_heads * head_dim] when config().qkv_bias, else empty
  WeightMatrix wq;               // [num_q_heads * head_dim][embedding_dim]
  WeightMatrix wk;               // [num_kv_heads * head_dim][embedding_dim]
  WeightMatrix wv;               // [num_kv_heads * head_dim][embedding_dim]
  WeightMatrix wo;               // [embedding_dim][num_q_heads * head_dim]
  WeightMatrix w_gate;           // [ffn_dim][embedding_dim]
  WeightMatrix w_up;             // [ffn_dim][embedding_dim]
  WeightMatrix w_down;           // [embedding_dim][ffn_dim]
};

}  // namespace minimakv
