#include "minimakv/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "minimakv/scalar_formats.h"
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

bool IsKQuant(GgmlType t) { return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K; }

constexpr int64_t kQ8_0BlockElements = 32;
constexpr int64_t kQ8_0BlockBytes = 2 + kQ8_0BlockElements;  // fp16 scale d, then 32 int8 codes
constexpr float kQ8_0MaxCode = 127.0f;

// Re-quantizes a K-quant matrix to Q8_0 blocks (ggml's quantize_row_q8_0_ref arithmetic: d = amax / 127 stored
// as fp16, codes round(x / d) with the fp32 scale), one row at a time.
Status RequantizeQ8_0(const GgufTensorInfo& t, std::vector<uint8_t>* out) {
  const int64_t cols = t.dims[0], rows = t.rows();
  if (cols % kQ8_0BlockElements != 0) {
    return Status::Unsupported("tensor '" + t.name + "' has rows of " + std::to_string(cols) +
                               " values, not a multiple of 32: cannot re-quantize to Q8_0");
  }
  const int64_t src_row_bytes = int64_t(t.size_bytes) / rows;
  const int64_t dst_row_bytes = cols / kQ8_0BlockElements * kQ8_0BlockBytes;
  out->assign(size_t(rows * dst_row_bytes), 0);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    MINIMAKV_RETURN_IF_ERROR(DequantizeToFloat(t.type, t.data + r * src_row_bytes, cols, row.data()));
    uint8_t* dst = out->data() + r * dst_row_bytes;
    for (int64_t b = 0; b < cols / kQ8_0BlockElements; ++b, dst += kQ8_0BlockBytes) {
      const float* x = row.data() + b * kQ8_0BlockElements;
      float amax = 0.0f;
      for (int64_t j = 0; j < kQ8_0BlockElements; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float d = amax / kQ8_0MaxCode;
      const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
      const uint16_t d_fp16 = FloatToFp16(d);
      std::memcpy(dst, &d_fp16, sizeof(d_fp16));
      for (int64_t j = 0; j < kQ8_0BlockElements; ++j) dst[2 + j] = uint8_t(int8_t(std::lround(x[j] * inv_d)));
    }
  }
  return Status::Ok();
}

struct MatrixLoader {
  const GgufFile& f;
  KQuantWeights kquant;
  std::vector<std::vector<uint8_t>>* requantized;
  size_t* bytes;

  Status Load(const std::string& name, int64_t cols, int64_t rows, WeightMatrix* out) const {
    const GgufTensorInfo* t = nullptr;
    MINIMAKV_RETURN_IF_ERROR(Tensor(f, name, {cols, rows}, &t));
    if (kquant == KQuantWeights::kRequantQ8_0 && IsKQuant(t->type)) {
      requantized->emplace_back();
      MINIMAKV_RETURN_IF_ERROR(RequantizeQ8_0(*t, &requantized->back()));
      GgufTensorInfo q8 = *t;
      q8.type = GgmlType::kQ8_0;
      q8.data = requantized->back().data();
      q8.size_bytes = requantized->back().size();
      MINIMAKV_RETURN_IF_ERROR(WeightMatrix::FromTensor(q8, out));
      *bytes += q8.size_bytes;
      return Status::Ok();
    }
    MINIMAKV_RETURN_IF_ERROR(WeightMatrix::FromTensor(*t, out));
    *bytes += out->type == GgmlType::kF32 ? out->f32.size() * sizeof(float) : size_t(t->size_bytes);
    return Status::Ok();
  }
};

}  // namespace

LlamaModel::~LlamaModel() = default;

std::vector<float> LlamaModel::MaxAbsKeyBias() const {
  std::vector<float> out(layers_.size(), 0.0f);
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (float b : layers_[i]->bk) out[i] = std::max(out[i], std::fabs(b));
  }
  return out;
}

std::vector<int> KeyBiasOutlierLayers(std::span<const float> max_abs_key_bias) {
  std::vector<int> out;
  if (max_abs_key_bias.empty()) return out;
  std::vector<float> sorted(max_abs_key_bias.begin(), max_abs_key_bias.end());
  // The lower median: with two layers, the smaller one (the upper median would be the outlier itself).
  const size_t mid = (sorted.size() - 1) / 2;
  std::nth_element(sorted.begin(), sorted.begin() + mid, sorted.end());
  const float median = sorted[mid];
  for (size_t i = 0; i < max_abs_key_bias.size(); ++i) {
    const float b = max_abs_key_bias[i];
    if (b > kKeyBiasOutlierMin && b > kKeyBiasOutlierFactor * median) out.push_back(int(i));
  }
  return out;
}

KQuantWeights LlamaLoadOptions::DefaultKQuantWeights() {
  const char* v = std::getenv("MINIMAKV_KQUANT_WEIGHTS");
  if (v != nullptr && std::string_view(v) == "fp32") return KQuantWeights::kFp32;
  return KQuantWeights::kRequantQ8_0;
}

Status LlamaModel::Load(const std::string& path, std::unique_ptr<LlamaModel>* out) {
  return Load(path, LlamaLoadOptions(), out);
}

Status LlamaModel::Load(const std::string& path, const LlamaLoadOptions& options, std::unique_ptr<LlamaModel>* out) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  MINIMAKV_RETURN_IF_ERROR(GgufFile::Open(path, &m->file_));
  const GgufFile& f = *m->file_;
  std::string arch;
  MINIMAKV_RETURN_IF_ERROR(f.GetString("general.architecture", &arch));
  if (arch != "llama" && arch != "qwen2") {
    return Status::Unsupported("model architecture '" + arch + "' (supported: 'llama', 'qwen2')");
  }
  LlamaConfig& c = m->config_;
  c.architecture = arch;
  c.rope_neox = arch == "qwen2";
  // qwen2 always has q/k/v biases; llama.cpp also loads them for "llama" when present (TENSOR_NOT_REQUIRED).
  c.qkv_bias = arch == "qwen2" || f.FindTensor("blk.0.attn_q.bias") != nullptr;
  const std::string k = arch + ".";  // hyper-parameter keys are prefixed with the architecture name
  if (f.Find("general.name") != nullptr) (void)f.GetString("general.name", &c.name);
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "block_count", &c.num_layers));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "embedding_length", &c.embedding_dim));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "feed_forward_length", &c.ffn_dim));
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "attention.head_count", &c.num_q_heads));
  c.num_kv_heads = c.num_q_heads;
  if (f.Find(k + "attention.head_count_kv") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "attention.head_count_kv", &c.num_kv_heads));
  }
  MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "context_length", &c.context_length));
  if (f.Find(k + "rope.freq_base") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(f.GetFloat32(k + "rope.freq_base", &c.rope_freq_base));
  }
  MINIMAKV_RETURN_IF_ERROR(f.GetFloat32(k + "attention.layer_norm_rms_epsilon", &c.rms_norm_eps));
  if (f.Find(k + "rope.scaling.type") != nullptr) {
    std::string scaling;
    MINIMAKV_RETURN_IF_ERROR(f.GetString(k + "rope.scaling.type", &scaling));
    if (scaling != "none") return Status::Unsupported(k + "rope.scaling.type '" + scaling + "'");
  }
  if (c.embedding_dim % c.num_q_heads != 0 || c.num_q_heads % c.num_kv_heads != 0) {
    return Status::Corruption("model heads do not divide: embedding " + std::to_string(c.embedding_dim) + ", " +
                              std::to_string(c.num_q_heads) + " query heads, " + std::to_string(c.num_kv_heads) +
                              " KV heads");
  }
  c.head_dim = c.embedding_dim / c.num_q_heads;
  c.rope_dims = c.head_dim;
  if (f.Find(k + "rope.dimension_count") != nullptr) {
    MINIMAKV_RETURN_IF_ERROR(GetInt(f, k + "rope.dimension_count", &c.rope_dims));
  }
  if (c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    return Status::Corruption(k + "rope.dimension_count " + std::to_string(c.rope_dims) + " vs head_dim " +
                              std::to_string(c.head_dim));
  }
  if (const GgufTensorInfo* freqs = f.FindTensor("rope_freqs.weight"); freqs != nullptr) {
    // Llama 3.1+ (llama.cpp's "llama3" RoPE scaling): one divisor per rotated pair, theta_i / factor_i.
    if (freqs->type != GgmlType::kF32 || freqs->num_elements != c.rope_dims / 2) {
      return Status::Corruption("tensor 'rope_freqs.weight' must hold rope_dims / 2 = " +
                                std::to_string(c.rope_dims / 2) + " f32 values; it holds " +
                                std::to_string(freqs->num_elements) + " of type " +
                                std::string(GgmlTypeName(freqs->type)));
    }
    c.rope_freq_factors.resize(size_t(freqs->num_elements));
    std::memcpy(c.rope_freq_factors.data(), freqs->data, sizeof(float) * c.rope_freq_factors.size());
    for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
      const float factor = c.rope_freq_factors[i];
      if (!(factor > 0.0f) || !std::isfinite(factor)) {
        return Status::Corruption("tensor 'rope_freqs.weight' entry " + std::to_string(i) + " is " +
                                  std::to_string(factor) + "; RoPE frequency divisors must be finite and > 0");
      }
    }
  }
  MINIMAKV_RETURN_IF_ERROR(Tokenizer::FromGguf(f, &m->tokenizer_));
  c.vocab_size = m->tokenizer_->vocab_size();

  const int64_t d = c.embedding_dim, q_dim = int64_t(c.num_q_heads) * c.head_dim;
  const int64_t kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  const MatrixLoader loader{f, options.kquant_weights, &m->requantized_, &m->weight_bytes_};
  m->token_embd_ = std::make_unique<WeightMatrix>();
  MINIMAKV_RETURN_IF_ERROR(loader.Load("token_embd.weight", d, c.vocab_size, m->token_embd_.get()));
  if (f.FindTensor("output.weight") != nullptr) {
    m->output_ = std::make_unique<WeightMatrix>();
    MINIMAKV_RETURN_IF_ERROR(loader.Load("output.weight", d, c.vocab_size, m->output_.get()));
  }
  c.tied_embeddings = m->output_ == nullptr;
  MINIMAKV_RETURN_IF_ERROR(LoadVector(f, "output_norm.weight", d, &m->output_norm_));
  for (int i = 0; i < c.num_layers; ++i) {
    auto layer = std::make_unique<Layer>();
    const std::string p = "blk." + std::to_string(i) + ".";
    MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "attn_norm.weight", d, &layer->attn_norm));
    MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "ffn_norm.weight", d, &layer->ffn_norm));
    if (c.qkv_bias) {
      MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "attn_q.bias", q_dim, &layer->bq));
      MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "attn_k.bias", kv_dim, &layer->bk));
      MINIMAKV_RETURN_IF_ERROR(LoadVector(f, p + "attn_v.bias", kv_dim, &layer->bv));
    }
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "attn_q.weight", d, q_dim, &layer->wq));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "attn_k.weight", d, kv_dim, &layer->wk));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "attn_v.weight", d, kv_dim, &layer->wv));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "attn_output.weight", q_dim, d, &layer->wo));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "ffn_gate.weight", d, c.ffn_dim, &layer->w_gate));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "ffn_up.weight", d, c.ffn_dim, &layer->w_up));
    MINIMAKV_RETURN_IF_ERROR(loader.Load(p + "ffn_down.weight", c.ffn_dim, d, &layer->w_down));
    m->layers_.push_back(std::move(layer));
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace minimakv
