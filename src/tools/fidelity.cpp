#include "tools/fidelity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>
#include <random>

#include "minimakv/cpu_attention.h"
#include "minimakv/kv_format.h"
#include "minimakv/reference_attention.h"
#include "minimakv/thread_pool.h"
#include "tools/synthetic_kv.h"

namespace minimakv {
namespace {

// Planted query directions: the i-th planted token's logit is raised by (kPlantStrength - i * kPlantStep)
// standard deviations of the noise logits, so one token dominates and the others follow, as in retrieval heads
// (the largest of 8K noise logits is about 3.8 standard deviations).
constexpr double kPlantStrength = 6.0;
constexpr double kPlantStep = 1.0;

// Rotate-half RoPE (Llama / HF convention): pair (i, i + d/2) rotated by pos * theta^(-2i/d).
void ApplyRope(float* x, int d, int64_t position, double theta) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = double(position) * std::pow(theta, -2.0 * i / d);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = x[i], b = x[i + half];
    x[i] = float(a * c - b * s);
    x[i + half] = float(a * s + b * c);
  }
}

struct SyntheticAttention {
  std::vector<float> k, v;  // [context][kv_heads][d], keys after RoPE
  std::vector<float> q;     // [num_queries][q_heads][d]
};

SyntheticAttention MakeData(const FidelityConfig& c) {
  SyntheticAttention data;
  const int d = c.head_dim;
  const size_t stride = size_t(c.kv_heads) * d;
  data.k.resize(size_t(c.context) * stride);
  data.v.resize(size_t(c.context) * stride);
  GaussianSource gauss(c.seed);
  gauss.Fill(data.v.data(), data.v.size());
  // Outlier channels: fixed per head, drawn once.
  std::mt19937_64 rng(c.seed + 17);
  std::vector<std::vector<int>> outliers(size_t(c.kv_heads));
  for (auto& channels : outliers) {
    std::vector<int> all(static_cast<size_t>(d));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    channels.assign(all.begin(), all.begin() + std::min(c.outlier_channels, d));
  }
  for (int64_t t = 0; t < c.context; ++t) {
    for (int h = 0; h < c.kv_heads; ++h) {
      float* key = data.k.data() + size_t(t) * stride + size_t(h) * d;
      gauss.Fill(key, size_t(d));
      for (int ch : outliers[size_t(h)]) key[ch] = float(key[ch] * c.outlier_scale);
      ApplyRope(key, d, t, c.rope_theta);
    }
  }
  // Queries: unit-variance noise plus planted directions toward chosen keys of their KV head.
  const int group = c.q_heads / c.kv_heads;
  data.q.resize(size_t(c.num_queries) * c.q_heads * d);
  gauss.Fill(data.q.data(), data.q.size());
  std::uniform_int_distribution<int64_t> pick(0, c.context - 1);
  for (int qi = 0; qi < c.num_queries; ++qi) {
    for (int head = 0; head < c.q_heads; ++head) {
      float* q = data.q.data() + (size_t(qi) * c.q_heads + head) * d;
      const int kv = head / group;
      for (int p = 0; p < c.planted_tokens; ++p) {
        const float* key = data.k.data() + size_t(pick(rng)) * stride + size_t(kv) * d;
        double norm = 0.0;
        for (int i = 0; i < d; ++i) norm += double(key[i]) * key[i];
        norm = std::sqrt(norm);
        if (norm == 0.0) continue;
        // q += a * k_hat adds a * |k| / sqrt(d) to this key's logit: a times the spread of the noise logits
        // (q's unit-variance noise gives logits ~ N(0, |k|^2 / d)).
        const double a = kPlantStrength - kPlantStep * p;
        for (int i = 0; i < d; ++i) q[i] = float(q[i] + a * key[i] / norm);
      }
    }
  }
  return data;
}

}  // namespace

Status RunFidelity(const FidelityConfig& c, const std::function<void(const std::string&)>& progress,
                   std::vector<FidelityRow>* rows) {
  MINIMAKV_RETURN_IF_ERROR(CheckHeadDim(c.head_dim));
  if (c.kv_heads < 1 || c.q_heads < 1 || c.q_heads % c.kv_heads != 0) {
    return Status::InvalidArgument("q_heads " + std::to_string(c.q_heads) + " must be a positive multiple of kv_heads " +
                                   std::to_string(c.kv_heads));
  }
  if (c.context < 1 || c.num_queries < 1 || c.page_tokens < 1) {
    return Status::InvalidArgument("context, num_queries and page_tokens must be >= 1");
  }
  auto bad = [](const std::string& what, const std::string& value, const std::string& want) {
    return Status::InvalidArgument(what + " " + value + " " + want);
  };
  if (c.context > kMaxFidelityContext) {
    return bad("context", std::to_string(c.context), "exceeds 2^24 tokens");
  }
  if (c.num_queries > kMaxFidelityQueries) {
    return bad("num_queries", std::to_string(c.num_queries), "exceeds " + std::to_string(kMaxFidelityQueries));
  }
  if (c.outlier_channels < 0 || c.outlier_channels > c.head_dim) {
    return bad("outlier_channels", std::to_string(c.outlier_channels),
               "not in [0, head_dim " + std::to_string(c.head_dim) + "]");
  }
  if (!std::isfinite(c.outlier_scale)) return bad("outlier_scale", std::to_string(c.outlier_scale), "is not finite");
  if (!std::isfinite(c.rope_theta) || !(c.rope_theta > 0.0)) {
    return bad("rope_theta", std::to_string(c.rope_theta), "must be finite and > 0");
  }
  if (c.planted_tokens < 0) return bad("planted_tokens", std::to_string(c.planted_tokens), "is negative");
  if (c.anchor_tokens < 0) return bad("anchor_tokens", std::to_string(c.anchor_tokens), "is negative");
  if (c.recent_tokens < 0) return bad("recent_tokens", std::to_string(c.recent_tokens), "is negative");
  if (c.num_threads > kMaxThreads) {
    return bad("num_threads", std::to_string(c.num_threads), "exceeds " + std::to_string(kMaxThreads));
  }
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  say("generating synthetic K/V: " + std::to_string(c.context) + " tokens, " + std::to_string(c.kv_heads) +
      " KV heads, d " + std::to_string(c.head_dim));
  SyntheticAttention data;
  try {
    data = MakeData(c);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("cannot hold the synthetic K/V of " + std::to_string(c.context) + " tokens x " +
                                     std::to_string(c.kv_heads) + " KV heads x d " + std::to_string(c.head_dim) +
                                     " in memory");
  }
  const int d = c.head_dim;
  const int group = c.q_heads / c.kv_heads;
  const size_t stride = size_t(c.kv_heads) * d;
  const double sm_scale = 1.0 / std::sqrt(double(d));

  // Reference: fp64 dense attention on the original K/V, per (query, head).
  say("fp64 dense reference on the original K/V");
  const size_t outputs = size_t(c.num_queries) * c.q_heads;
  std::vector<double> ref(outputs * d);
  std::vector<int64_t> ref_top1(outputs);
  {
    std::vector<float> keys(size_t(c.context) * d), values(size_t(c.context) * d);
    std::vector<double> weights;
    for (int kv = 0; kv < c.kv_heads; ++kv) {
      for (int64_t t = 0; t < c.context; ++t) {
        std::memcpy(keys.data() + size_t(t) * d, data.k.data() + size_t(t) * stride + size_t(kv) * d, sizeof(float) * d);
        std::memcpy(values.data() + size_t(t) * d, data.v.data() + size_t(t) * stride + size_t(kv) * d, sizeof(float) * d);
      }
      for (int qi = 0; qi < c.num_queries; ++qi) {
        for (int g = 0; g < group; ++g) {
          const size_t row = size_t(qi) * c.q_heads + size_t(kv) * group + g;
          DenseAttentionF64(data.q.data() + row * d, keys.data(), values.data(), c.context, d, sm_scale,
                            ref.data() + row * d, &weights);
          ref_top1[row] = std::max_element(weights.begin(), weights.end()) - weights.begin();
        }
      }
    }
  }

  HadamardRotation rotation;
  MINIMAKV_RETURN_IF_ERROR(HadamardRotation::Create(d, HadamardRotation::kDefaultSeed, &rotation));
  const KvSource source = [&](int, int64_t token, float* k, float* v) {
    std::memcpy(k, data.k.data() + size_t(token) * stride, sizeof(float) * stride);
    std::memcpy(v, data.v.data() + size_t(token) * stride, sizeof(float) * stride);
  };
  std::vector<int32_t> q_indptr = {0, c.num_queries};
  AttentionQueries queries;
  queries.q = data.q.data();
  queries.q_indptr = q_indptr.data();
  queries.num_seqs = 1;
  queries.num_q_heads = c.q_heads;
  queries.sm_scale = float(sm_scale);

  rows->clear();
  for (const std::string path : {"bf16", "fp8", "tq3", "minima"}) {
    say("encoding and attending: " + path);
    std::vector<std::pair<KvFormat, std::vector<TokenRange>>> tiers;
    if (path == "bf16") tiers.push_back({KvFormat::kBf16, {{0, c.context}}});
    if (path == "fp8") tiers.push_back({KvFormat::kFp8, {{0, c.context}}});
    if (path == "tq3") tiers.push_back({KvFormat::kTq3, {{0, c.context}}});
    if (path == "minima") {
      std::vector<TokenRange> fp8, tq3;
      SplitMinimaTiers(c.context, c.page_tokens, c.anchor_tokens, c.recent_tokens, &fp8, &tq3);
      tiers.push_back({KvFormat::kFp8, fp8});
      if (!tq3.empty()) tiers.push_back({KvFormat::kTq3, tq3});
    }
    std::vector<SyntheticPool> pools(tiers.size());
    std::vector<PagedKvView> views;
    std::vector<int64_t> positions;  // token position of each listed token, in view order
    double payload_bits = 0.0;
    for (size_t i = 0; i < tiers.size(); ++i) {
      const PageLayout layout{tiers[i].first, c.kv_heads, d, c.page_tokens};
      MINIMAKV_RETURN_IF_ERROR(BuildSyntheticPool(layout, &rotation, {tiers[i].second}, source, 0, &pools[i]));
      views.push_back(pools[i].View());
      for (const TokenRange& r : tiers[i].second) {
        for (int64_t t = r.begin_token; t < r.end_token; ++t) positions.push_back(t);
        payload_bits += double(r.end_token - r.begin_token) * 2.0 * c.kv_heads * BytesPerVector(layout.format, d) * 8.0;
      }
    }
    std::vector<float> out(outputs * d);
    CpuAttentionOptions options;
    options.num_threads = std::max(1, c.num_threads);
    MINIMAKV_RETURN_IF_ERROR(AttendMixedCpu(views, queries, &rotation, out.data(), nullptr, options));

    // Top-1 of the quantized path: argmax of q . k_hat over the decoded keys (softmax keeps the argmax).
    std::vector<int64_t> top1(outputs, -1);
    std::vector<double> best(outputs, -INFINITY);
    std::vector<float> keys, values;
    int64_t listed = 0;
    for (size_t i = 0; i < views.size(); ++i) {
      int64_t view_tokens = 0;
      for (int kv = 0; kv < c.kv_heads; ++kv) {
        MINIMAKV_RETURN_IF_ERROR(DequantizeViewHead(views[i], &rotation, 0, kv, &keys, &values));
        view_tokens = int64_t(keys.size()) / d;
        for (int qi = 0; qi < c.num_queries; ++qi) {
          for (int g = 0; g < group; ++g) {
            const size_t row = size_t(qi) * c.q_heads + size_t(kv) * group + g;
            const float* q = data.q.data() + row * d;
            for (int64_t t = 0; t < view_tokens; ++t) {
              double dot = 0.0;
              for (int e = 0; e < d; ++e) dot += double(q[e]) * keys[size_t(t) * d + e];
              if (dot > best[row]) {
                best[row] = dot;
                top1[row] = positions[size_t(listed + t)];
              }
            }
          }
        }
      }
      listed += view_tokens;
    }

    FidelityRow row;
    row.path = path;
    double err = 0.0, norm = 0.0, cosine_sum = 0.0, agree = 0.0;
    for (size_t r = 0; r < outputs; ++r) {
      double dot = 0.0, a2 = 0.0, b2 = 0.0;
      for (int e = 0; e < d; ++e) {
        const double a = out[r * d + e], b = ref[r * d + e];
        err += (a - b) * (a - b);
        norm += b * b;
        dot += a * b;
        a2 += a * a;
        b2 += b * b;
      }
      cosine_sum += (a2 > 0.0 && b2 > 0.0) ? dot / std::sqrt(a2 * b2) : 0.0;
      agree += top1[r] == ref_top1[r] ? 1.0 : 0.0;
    }
    row.rel_l2 = std::sqrt(err / norm);
    row.cosine = cosine_sum / double(outputs);
    row.top1_agreement = agree / double(outputs);
    row.bits_per_value = payload_bits / (double(c.context) * 2.0 * c.kv_heads * d);
    rows->push_back(row);
  }
  return Status::Ok();
}

}  // namespace minimakv
