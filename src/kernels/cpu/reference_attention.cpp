// Materializing reference attention (tests and quality control): codec decode functions + fp64 softmax.
#include "minimakv/reference_attention.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {

Status DequantizeViewHead(const PagedKvView& view, const HadamardRotation* rotation, int seq, int kv_head,
                          std::vector<float>* keys, std::vector<float>* values) {
  const PageLayout& layout = view.layout;
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(layout));
  if (seq < 0 || seq >= view.num_seqs) return Status::InvalidArgument("seq " + std::to_string(seq) + " is outside the view");
  if (kv_head < 0 || kv_head >= layout.kv_heads) {
    return Status::InvalidArgument("kv_head " + std::to_string(kv_head) + " is outside 0.." + std::to_string(layout.kv_heads - 1));
  }
  if (layout.format == KvFormat::kTq3 && (rotation == nullptr || rotation->head_dim() != layout.head_dim)) {
    return Status::InvalidArgument("decoding a TQ3 view needs a rotation of head_dim " + std::to_string(layout.head_dim));
  }
  const int d = layout.head_dim;
  const int64_t tokens = ViewSeqTokens(view, seq);
  keys->assign(size_t(tokens) * d, 0.0f);
  values->assign(size_t(tokens) * d, 0.0f);
  int64_t row = 0;
  for (int32_t i = view.page_indptr[seq]; i < view.page_indptr[seq + 1]; ++i) {
    const uint8_t* page = view.pages + size_t(view.page_ids[i]) * layout.page_bytes();
    const int page_tokens = i + 1 == view.page_indptr[seq + 1] ? view.last_page_tokens[seq] : layout.page_tokens;
    for (int t = 0; t < page_tokens; ++t, ++row) {
      for (int kv = 0; kv < 2; ++kv) {
        const uint8_t* codes = page + (kv == 0 ? layout.k_codes_offset(kv_head, t) : layout.v_codes_offset(kv_head, t));
        const uint8_t* scale = page + (kv == 0 ? layout.k_scale_offset(kv_head, t) : layout.v_scale_offset(kv_head, t));
        float* dst = (kv == 0 ? keys : values)->data() + row * d;
        switch (layout.format) {
          case KvFormat::kBf16: {
            uint16_t bf16[256];
            std::memcpy(bf16, codes, layout.code_bytes());
            Bf16DecodeVector(bf16, d, dst);
            break;
          }
          case KvFormat::kFp8: {
            float s;
            std::memcpy(&s, scale, sizeof s);
            Fp8DecodeVector(codes, s, d, dst);
            break;
          }
          case KvFormat::kTq3: {
            uint16_t s;
            std::memcpy(&s, scale, sizeof s);
            Tq3DecodeVector(*rotation, codes, s, dst);
            break;
          }
        }
      }
    }
  }
  return Status::Ok();
}

double DenseAttentionF64(const float* q, const float* keys, const float* values, int64_t n, int head_dim,
                         double sm_scale, double* out, std::vector<double>* weights) {
  for (int i = 0; i < head_dim; ++i) out[i] = 0.0;
  if (weights != nullptr) weights->assign(size_t(n), 0.0);
  if (n == 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> logits(static_cast<size_t>(n));
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int64_t k = 0; k < n; ++k) {
    double dot = 0.0;
    for (int i = 0; i < head_dim; ++i) dot += double(q[i]) * double(keys[k * head_dim + i]);
    logits[size_t(k)] = dot * sm_scale;
    max_logit = std::fmax(max_logit, logits[size_t(k)]);
  }
  double sum = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    const double p = std::exp(logits[size_t(k)] - max_logit);
    logits[size_t(k)] = p;
    sum += p;
    for (int i = 0; i < head_dim; ++i) out[i] += p * double(values[k * head_dim + i]);
  }
  for (int i = 0; i < head_dim; ++i) out[i] /= sum;
  if (weights != nullptr) {
    for (int64_t k = 0; k < n; ++k) (*weights)[size_t(k)] = logits[size_t(k)] / sum;
  }
  return (max_logit + std::log(sum)) / std::log(2.0);
}

Status ReferenceAttention(std::span<const PagedKvView> views, const AttentionQueries& queries,
                          const HadamardRotation* rotation, std::vector<double>* out,
                          std::vector<double>* lse_log2) {
  if (views.empty()) return Status::InvalidArgument("ReferenceAttention needs at least one view");
  const int d = views[0].layout.head_dim;
  const int kv_heads = views[0].layout.kv_heads;
  for (const PagedKvView& view : views) {
    if (view.layout.head_dim != d || view.layout.kv_heads != kv_heads || view.num_seqs != queries.num_seqs) {
      return Status::InvalidArgument("ReferenceAttention: views disagree on head_dim, kv_heads or num_seqs");
    }
  }
  if (queries.num_q_heads <= 0 || queries.num_q_heads % kv_heads != 0) {
    return Status::InvalidArgument("num_q_heads " + std::to_string(queries.num_q_heads) + " is not a multiple of kv_heads " +
                                   std::to_string(kv_heads));
  }
  const int heads = queries.num_q_heads;
  const int group = heads / kv_heads;
  const int64_t total_q = queries.num_seqs == 0 ? 0 : queries.q_indptr[queries.num_seqs];
  out->assign(size_t(total_q) * heads * d, 0.0);
  lse_log2->assign(size_t(total_q) * heads, -std::numeric_limits<double>::infinity());
  std::vector<float> keys, values, view_keys, view_values;
  for (int s = 0; s < queries.num_seqs; ++s) {
    for (int h = 0; h < kv_heads; ++h) {
      keys.clear();
      values.clear();
      for (const PagedKvView& view : views) {
        MINIMAKV_RETURN_IF_ERROR(DequantizeViewHead(view, rotation, s, h, &view_keys, &view_values));
        keys.insert(keys.end(), view_keys.begin(), view_keys.end());
        values.insert(values.end(), view_values.begin(), view_values.end());
      }
      const int64_t n = int64_t(keys.size()) / d;
      for (int64_t t = queries.q_indptr[s]; t < queries.q_indptr[s + 1]; ++t) {
        for (int g = 0; g < group; ++g) {
          const int64_t row = t * heads + int64_t(h) * group + g;
          (*lse_log2)[size_t(row)] = DenseAttentionF64(queries.q + row * d, keys.data(), values.data(), n, d,
                                                       queries.sm_scale, out->data() + row * d, nullptr);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace minimakv
