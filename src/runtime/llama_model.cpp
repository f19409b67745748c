#include "minimakv/llama_model.h"

#include "runtime/llama_layer.h"
#include "runtime/quant_matmul.h"

namespace minimakv {
namespace {

Status GetInt(const GgufFile& f, const std::string& key, int* out) {
  uint32_t v = 0;
  MINIMAKV_RETURN_IF_ERROR(f.GetUint32(key, &v));
  if (v == 0 || v > (1u << 30)) return Status::Corruption("GGUF " + key + " = " + std::to_string(v) + " is out of range");
  *out = int(v);
  return Status::Ok();
}

Status Tensor(const GgufFile& f, const std::string& name, const std::vector<int64_t>& dims,
              const GgufTensorInfo** out) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return Status::NotFound("model tensor '" + name + "' is missing");
  if (t->dims != dims) {
    auto join = [](const std::vector<int64_t>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) s.push_back(',');
        s.append(std::to_string(v[i]));
      }
      return s;
    };
    const std::string got = join(t->dims), want = join(dims);
    return Status::Corruption("model tensor '" + name + "' has dims [" + got + "], expected [" + want + "]");
  }
  *out = t;
  return Status::Ok();
}

Status LoadVector(const GgufFile& f, const std::string& name, int64_t n, std::vector<float>* out) {
  const GgufTensorInfo* t = nullptr;
  MINIMAKV_RETURN_IF_ERROR(Tensor(f, name, {n}, &t));
  out->resize(size_t(n));
  return DequantizeToFloat(t->type, t->data, n, out->data());
}

Status LoadMatrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows, WeightMatrix* out,
                  size_t* bytes) {
  const GgufTensorInfo* t = nullptr;
  MINIMAKV_RETURN_IF_ERROR(Tensor(f, name, {cols, rows}, &t));
  MINIMAKV_RETURN_IF_ERROR(WeightMatrix::FromTensor(*t, out));
  *bytes += out->type == GgmlType::kF32 ? out->f32.size() * sizeof(float) : size_t(t->size_bytes);
  return Status::Ok();
}

}  // namespace

LlamaModel::~LlamaModel() = default;

Status LlamaModel::Load(const std::string& path, std::unique_ptr<LlamaModel>* out) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  MINIMAKV_RETURN_IF_ERROR(GgufFile::Open(path, &m->file_));
  const GgufFile& f = *m->file_;
  std::string arch;
  MINIMAKV_RETURN_IF_ERROR(f.GetString("general.architecture", &arch));
  if (arch != "llama") {
    return Status::Unsupported("model architecture '" + arch + "' (only 'llama' is supported)");
  }
  LlamaConfig& c = m->config_;
  if (f.Find("general.name") != nullptr) (void)f.GetString("general.name", &c.name);
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.block_count", &c.num_layers));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.embedding_length", &c.embedding_dim));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.feed_forward_length", &c.ffn_dim));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.attention.head_count", &c.num_q_heads));
  c.num_kv_heads = c.num_q_heads;
  if (f.Find("llama.attention.head_count_kv") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.attention.head_count_kv", &c.num_kv_heads));
  }
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.context_length", &c.context_length));
  if (f.Find("llama.rope.freq_base") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(f.GetFloat32("llama.rope.freq_base", &c.rope_freq_base));
  }
  MINIMAKV_RETURN_IF_ERROR(f.GetFloat32("llama.attention.layer_norm_rms_epsilon", &c.rms_norm_eps));
  if (c.embedding_dim % c.num_q_heads != 0 || c.num_q_heads % c.num_kv_heads != 0) {
    return Status::Corruption("model heads do not divide: embedding " + std::to_string(c.embedding_dim) + ", " +
                              std::to_string(c.num_q_heads) + " query heads, " + std::to_string(c.num_kv_heads) +
                              " KV heads");
  }
  c.head_dim = c.embedding_dim / c.num_q_heads;
  c.rope_dims = c.head_dim;
  if (f.Find("llama.rope.dimension_count") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(GetInt(f, "llama.rope.dimension_count", &c.rope_dims));
  }
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return Status::Corruption("llama.rope.dimension_count " + std::to_string(c.rope_dims) + " vs head_dim " +
                              std::to_string(c.head_dim));
  }
  MINIMAKV_RETURN_IF_ERROR(Tokenizer::FromGguf(f, &m->tokenizer_));
  c.vocab_size = m->tokenizer_->vocab_size();

  const int64_t d = c.embedding_dim, q_dim = int64_t(c.num_q_heads) * c.head_dim;
  const int64_t kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  m->token_embd_ = std::make_unique<WeightMatrix>();
  MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, "token_embd.weight", d, c.vocab_size, m->token_embd_.get(), &m->weight_bytes_));
  if (f.FindTensor("output.weight") != nullptr) {
    m->output_ = std::make_unique<WeightMatrix>();
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, "output.weight", d, c.vocab_size, m->output_.get(), &m->weight_bytes_));
  }
  c.tied_embeddings = m->output_ == nullptr;
  MINIMAKV_RETURN_IF_ERROR(LoadVector(f, "output_norm.weight", d, &m->output_norm_));
  for (int i = 0; i < c.num_layers; ++i) {
    auto layer = std::make_unique<Layer>();
    const std::string p = "blk." + std::to_string(i) + ".";
    size_t* b = &m->weight_bytes_;
    MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "attn_norm.weight", d, &layer->attn_norm));
    MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "ffn_norm.weight", d, &layer->ffn_norm));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "attn_q.weight", d, q_dim, &layer->wq, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "attn_k.weight", d, kv_dim, &layer->wk, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "attn_v.weight", d, kv_dim, &layer->wv, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "attn_output.weight", q_dim, d, &layer->wo, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "ffn_gate.weight", d, c.ffn_dim, &layer->w_gate, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "ffn_up.weight", d, c.ffn_dim, &layer->w_up, b));
    MINIMAKV_RETURN_IF_ERROR(LoadMatrix(f, p + "ffn_down.weight", c.ffn_dim, d, &layer->w_down, b));
    m->layers_.push_back(std::move(layer));
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace minimakv
