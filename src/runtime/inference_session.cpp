#include "minimakv/inference_session.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "minimakv/cpu_attention.h"
#include "minimakv/page_layout.h"
#include "minimakv/paged_cache.h"
#include "minimakv/partial_state.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/thread_pool.h"
#include "runtime/llama_layer.h"
#include "runtime/prompt_attention.h"
#include "runtime/quant_matmul.h"

namespace minimakv {
namespace {

float RoundFp16(float x) { return Fp16ToFloat(FloatToFp16(x)); }

// The cache part of attention runs on at most this many threads (AttendCacheSplit).
constexpr int kMaxCacheSplits = 8;
constexpr double kBytesPerGibibyte = 1024.0 * 1024.0 * 1024.0;

// y = x / sqrt(mean(x^2) + eps) * weight. The sum of squares is accumulated in double, as ggml's rms_norm.
void RmsNorm(const float* x, const float* weight, int n, float eps, float* y) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float mean = float(sum / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) y[i] = (x[i] * scale) * weight[i];
}

// "Normal" RoPE (llama.cpp rope type 0): rotates adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/dims),
// the angle advanced by repeated multiplication in fp32 as ggml's rope cache does. NEOX RoPE (qwen2) rotates
// the pairs (x[i], x[i + dims/2]) by the same angles (ggml rope_f32 with GGML_ROPE_TYPE_NEOX). Frequency factors
// (rope_freqs.weight, may be empty) divide pair i's angle, as ggml_rope_cache_init's theta / freq_factors[i].
// cos/sin of every rotated pair's angle at one position; q and k of that position share it.
struct RopeAngles {
  float cos_sin[2 * 256];
};
void RopeAnglesAt(int rope_dims, int64_t pos, float freq_base, const std::vector<float>& freq_factors,
                  RopeAngles* angles) {
  const float theta_scale = std::pow(freq_base, -2.0f / float(rope_dims));
  float theta = float(pos);
  for (int i = 0; i < rope_dims; i += 2) {
    const float angle = freq_factors.empty() ? theta : theta / freq_factors[size_t(i / 2)];
    angles->cos_sin[i] = std::cos(angle);
    angles->cos_sin[i + 1] = std::sin(angle);
    theta *= theta_scale;
  }
}
void ApplyRope(float* x, int heads, int head_dim, int rope_dims, const RopeAngles& angles, bool neox) {
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < rope_dims; i += 2) {
      const float c = angles.cos_sin[i], s = angles.cos_sin[i + 1];
      const int i0 = neox ? i / 2 : i, i1 = neox ? i / 2 + rope_dims / 2 : i + 1;
      const float x0 = v[i0], x1 = v[i1];
      v[i0] = x0 * c - x1 * s;
      v[i1] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

std::string_view KvModeName(KvMode mode) {
  switch (mode) {
    case KvMode::kDense: return "dense";
    case KvMode::kBf16: return "bf16";
    case KvMode::kFp8: return "fp8";
    case KvMode::kTq3: return "tq3";
    case KvMode::kMinima: return "minima";
  }
  return "unknown";
}

Status ParseKvMode(std::string_view name, KvMode* mode) {
  for (KvMode m : {KvMode::kDense, KvMode::kBf16, KvMode::kFp8, KvMode::kTq3, KvMode::kMinima}) {
    if (name == KvModeName(m)) {
      *mode = m;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV mode '" + std::string(name) + "' (dense, bf16, fp8, tq3, minima)");
}

struct InferenceSession::Impl {
  explicit Impl(int threads) : pool(threads) {}
  // Attention over the cache views of one sequence on the runtime's own threads: each format's pages are cut
  // into pool.num_threads() contiguous ranges, thread i runs AttendMixedCpu (single-threaded) over its ranges
  // of every format, and the partial states are merged by LSE. This keeps the persistent pool busy instead of
  // AttendMixedCpu starting and joining its own threads twice per layer and decode step.
  //   rows = query tokens x query heads; out [rows][head_dim], lse_log2 [rows].
  Status AttendCacheSplit(std::span<const PagedKvView> views, const AttentionQueries& queries,
                          const HadamardRotation* rotation, int64_t rows, int head_dim, float* out,
                          float* lse_log2);
  const LlamaModel* model = nullptr;
  ThreadPool pool;
  MatMulScratch q8_scratch;
  PromptAttentionScratch attention_scratch;
  // Dense mode: per layer [max_tokens][kv_heads * head_dim].
  std::vector<std::vector<float>> dense_k, dense_v;
  // Paged modes.
  std::unique_ptr<PagedCache> cache;
  SeqId seq = 0;
  FormatViewStorage view_storage[kNumKvFormats];
  // Activations, resized per chunk.
  std::vector<float> x, xn, q, k, v, attn, proj, gate, up, cache_out, cache_lse, chunk_lse;
  std::vector<float> split_out, split_lse;  // partial states of splits 1.. (AttendCacheSplit)
};

Status InferenceSession::Impl::AttendCacheSplit(std::span<const PagedKvView> views, const AttentionQueries& queries,
                                                const HadamardRotation* rotation, int64_t rows, int head_dim,
                                                float* out, float* lse_log2) {
  const int splits = std::min(pool.num_threads(), kMaxCacheSplits);
  const size_t num_views = views.size();
  // Sub-views: split s of view v takes pages [n * s / splits, n * (s + 1) / splits) of the (single) sequence;
  // only the split holding the view's last page keeps its partial fill.
  PagedKvView sub[kMaxCacheSplits][kNumKvFormats];
  int32_t indptr[kMaxCacheSplits][kNumKvFormats][2];
  int32_t full_page[kMaxCacheSplits][kNumKvFormats];
  bool any_pages[kMaxCacheSplits] = {};
  for (int sp = 0; sp < splits; ++sp) {
    for (size_t v = 0; v < num_views; ++v) {
      const PagedKvView& view = views[v];
      const int32_t n = view.page_indptr[1] - view.page_indptr[0];
      const int32_t begin = int32_t(int64_t(n) * sp / splits), end = int32_t(int64_t(n) * (sp + 1) / splits);
      PagedKvView& sv = sub[sp][v];
      sv = view;
      indptr[sp][v][0] = 0;
      indptr[sp][v][1] = end - begin;
      sv.page_indptr = indptr[sp][v];
      sv.page_ids = view.page_ids + view.page_indptr[0] + begin;
      full_page[sp][v] = view.layout.page_tokens;
      sv.last_page_tokens = end == n ? view.last_page_tokens : &full_page[sp][v];
      any_pages[sp] = any_pages[sp] || end > begin;
    }
  }
  split_out.resize(size_t((splits - 1) * rows * head_dim));
  split_lse.resize(size_t((splits - 1) * rows));
  Status results[kMaxCacheSplits];
  pool.ParallelForEach(splits, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t sp = s0; sp < s1; ++sp) {
      float* o = sp == 0 ? out : split_out.data() + (sp - 1) * rows * head_dim;
      float* lse = sp == 0 ? lse_log2 : split_lse.data() + (sp - 1) * rows;
      if (!any_pages[sp]) {  // an empty state: contributes nothing to the merge
        std::fill(o, o + rows * head_dim, 0.0f);
        std::fill(lse, lse + rows, -INFINITY);
        continue;
      }
      CpuAttentionOptions opts;
      opts.num_threads = 1;
      results[sp] = AttendMixedCpu(std::span<const PagedKvView>(sub[sp], num_views), queries, rotation, o, lse, opts);
    }
  });
  for (int sp = 0; sp < splits; ++sp) MINIMAKV_RETURN_IF_ERROR(std::move(results[sp]));
  for (int sp = 1; sp < splits; ++sp) {
    const float* o = split_out.data() + (sp - 1) * rows * head_dim;
    const float* lse = split_lse.data() + (sp - 1) * rows;
    for (int64_t r = 0; r < rows; ++r) MergePartialState(out + r * head_dim, &lse_log2[r], o + r * head_dim, lse[r], head_dim);
  }
  return Status::Ok();
}

InferenceSession::~InferenceSession() = default;

Status InferenceSession::Create(const LlamaModel* model, const SessionOptions& options,
                                std::unique_ptr<InferenceSession>* out) {
  if (model == nullptr) return Status::InvalidArgument("InferenceSession::Create: null model");
  if (options.num_threads < 1 || options.num_threads > kMaxThreads) {
    return Status::InvalidArgument("num_threads " + std::to_string(options.num_threads) + " must be in [1, " +
                                   std::to_string(kMaxThreads) + "]");
  }
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->options_ = options;
  const LlamaConfig& c = model->config();
  if (s->options_.max_tokens <= 0) s->options_.max_tokens = c.context_length;
  s->impl_ = std::make_unique<Impl>(options.num_threads);
  Impl& im = *s->impl_;
  im.model = model;
  const int64_t kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  if (options.mode == KvMode::kDense) {
    // The dense cache is allocated and zeroed whole: one larger than the machine's memory is refused up front
    // (max_tokens defaults to the model's context length, which some models put at millions of tokens).
    const double dense_bytes =
        2.0 * double(c.num_layers) * double(s->options_.max_tokens) * double(kv_dim) * double(sizeof(float));
    const double memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (memory_bytes > 0 && dense_bytes > memory_bytes) {
      return Status::ResourceExhausted("dense KV cache for max_tokens " + std::to_string(s->options_.max_tokens) +
                                       " needs " + std::to_string(dense_bytes / kBytesPerGibibyte) +
                                       " GiB, more than the machine's " +
                                       std::to_string(memory_bytes / kBytesPerGibibyte) + " GiB");
    }
    try {
      im.dense_k.assign(size_t(c.num_layers), std::vector<float>(size_t(s->options_.max_tokens * kv_dim)));
      im.dense_v.assign(size_t(c.num_layers), std::vector<float>(size_t(s->options_.max_tokens * kv_dim)));
    } catch (const std::bad_alloc&) {
      return Status::ResourceExhausted("cannot allocate the dense KV cache for max_tokens " +
                                       std::to_string(s->options_.max_tokens));
    }
  } else {
    CacheConfig cc;
    cc.num_layers = c.num_layers;
    cc.kv_heads = c.num_kv_heads;
    cc.head_dim = c.head_dim;
    cc.page_tokens = options.page_tokens;
    // Checked before the page count divides by it (PagedCache::Create would say the same, but only later).
    if (options.page_tokens < 1 || options.page_tokens > kMaxPageTokens) {
      return Status::InvalidArgument("SessionOptions.page_tokens = " + std::to_string(options.page_tokens) +
                                     " must be in [1, " + std::to_string(kMaxPageTokens) + "]");
    }
    cc.policy.anchor_tokens = options.anchor_tokens;
    cc.policy.recent_tokens = options.recent_tokens;
    cc.policy.hot_layers = options.hot_layers;
    if (options.mode != KvMode::kBf16) {
      cc.bf16_layers = options.bf16_layers;
      if (options.auto_hot_layers) {
        for (int layer : KeyBiasOutlierLayers(model->MaxAbsKeyBias())) cc.bf16_layers.push_back(layer);
      }
    }
    // Distinct BF16 layers (the lists may repeat; an entry out of range is PagedCache::Create's error).
    std::vector<bool> is_bf16_layer(size_t(c.num_layers), false);
    for (int layer : cc.bf16_layers) {
      if (layer >= 0 && layer < c.num_layers) is_bf16_layer[size_t(layer)] = true;
    }
    const int64_t bf16_layer_count = std::count(is_bf16_layer.begin(), is_bf16_layer.end(), true);
    // Pages for max_tokens per layer, one spare for the partly-filled page (int64: max_tokens may be INT_MAX).
    const int64_t pages_per_layer =
        (int64_t(s->options_.max_tokens) + options.page_tokens - 1) / options.page_tokens + 1;
    const size_t pages = size_t(pages_per_layer) * size_t(c.num_layers - bf16_layer_count);
    const size_t bf16_pages = size_t(pages_per_layer) * size_t(bf16_layer_count);
    auto page_bytes = [&](KvFormat f) {
      PageLayout l;
      l.format = f;
      l.kv_heads = c.num_kv_heads;
      l.head_dim = c.head_dim;
      l.page_tokens = options.page_tokens;
      return l.page_bytes();
    };
    cc.pool_bytes[int(KvFormat::kBf16)] = bf16_pages * page_bytes(KvFormat::kBf16);
    switch (options.mode) {
      case KvMode::kBf16:
        cc.hot_format = KvFormat::kBf16;
        cc.pool_bytes[int(KvFormat::kBf16)] = size_t(pages_per_layer) * size_t(c.num_layers) *
                                              page_bytes(KvFormat::kBf16);
        cc.policy.convert_stale_to_tq3 = false;
        break;
      case KvMode::kFp8:
        cc.hot_format = KvFormat::kFp8;
        cc.pool_bytes[int(KvFormat::kFp8)] = pages * page_bytes(KvFormat::kFp8);
        cc.policy.convert_stale_to_tq3 = false;
        break;
      case KvMode::kTq3:
      case KvMode::kMinima:
        cc.hot_format = KvFormat::kFp8;
        cc.pool_bytes[int(KvFormat::kFp8)] = pages * page_bytes(KvFormat::kFp8);
        cc.pool_bytes[int(KvFormat::kTq3)] = pages * page_bytes(KvFormat::kTq3);
        cc.policy.convert_stale_to_tq3 = true;
        if (options.mode == KvMode::kTq3) cc.policy.recent_tokens = 0;
        break;
      case KvMode::kDense:
        break;
    }
    MINIMAKV_RETURN_IF_ERROR(PagedCache::Create(cc, &im.cache));
    MINIMAKV_RETURN_IF_ERROR(im.cache->AddSequence(&im.seq));
  }
  *out = std::move(s);
  return Status::Ok();
}

Status InferenceSession::Forward(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits) {
  return ForwardImpl(tokens, all_logits, logits, {});
}

Status InferenceSession::PrefillShared(std::span<InferenceSession* const> sessions, std::span<const int32_t> tokens,
                                       std::vector<float>* logits) {
  if (sessions.empty()) return Status::InvalidArgument("PrefillShared: no sessions");
  if (tokens.size() < 2) return Status::InvalidArgument("PrefillShared: needs a chunk of at least 2 tokens");
  for (InferenceSession* s : sessions) {
    if (s == nullptr || s->num_past_ != 0 || s->impl_->model != sessions[0]->impl_->model) {
      return Status::InvalidArgument("PrefillShared: every session must be fresh and share the model");
    }
    if (int64_t(tokens.size()) > s->options_.max_tokens) {
      return Status::InvalidArgument("PrefillShared: prompt of " + std::to_string(tokens.size()) +
                                     " tokens exceeds max_tokens " + std::to_string(s->options_.max_tokens) +
                                     " of a " + std::string(KvModeName(s->options_.mode)) + " session");
    }
  }
  MINIMAKV_RETURN_IF_ERROR(sessions[0]->ForwardImpl(tokens, false, logits, sessions.subspan(1)));
  for (InferenceSession* s : sessions.subspan(1)) s->num_past_ = int64_t(tokens.size());
  return Status::Ok();
}

Status InferenceSession::StoreFollowerKv(int layer, const float* k, const float* v, int64_t tokens) {
  Impl& im = *impl_;
  if (im.cache) return im.cache->Append(im.seq, layer, k, v, int(tokens));
  const LlamaConfig& c = im.model->config();
  const int64_t kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  const bool round = options_.emulate_llama_cpp_f16;
  float* kc = im.dense_k[size_t(layer)].data() + num_past_ * kv_dim;
  float* vc = im.dense_v[size_t(layer)].data() + num_past_ * kv_dim;
  for (int64_t i = 0; i < tokens * kv_dim; ++i) {
    kc[i] = round ? RoundFp16(k[i]) : k[i];
    vc[i] = round ? RoundFp16(v[i]) : v[i];
  }
  return Status::Ok();
}

Status InferenceSession::ForwardImpl(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits,
                                     std::span<InferenceSession* const> followers) {
  Impl& im = *impl_;
  const LlamaModel& model = *im.model;
  const LlamaConfig& c = model.config();
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return Status::InvalidArgument("Forward: empty token chunk");
  if (num_past_ + T > options_.max_tokens) {
    return Status::InvalidArgument("Forward: context " + std::to_string(num_past_ + T) + " exceeds max_tokens " +
                                   std::to_string(options_.max_tokens));
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) return Status::InvalidArgument("Forward: token id " + std::to_string(t) +
                                                                   " outside the vocabulary of " +
                                                                   std::to_string(c.vocab_size));
  }
  const int d = c.embedding_dim, hd = c.head_dim, nq = c.num_q_heads, nkv = c.num_kv_heads;
  const int64_t q_dim = int64_t(nq) * hd, kv_dim = int64_t(nkv) * hd;
  const float sm_scale = 1.0f / std::sqrt(float(hd));
  const bool dense = options_.mode == KvMode::kDense;
  const bool emulate = dense && options_.emulate_llama_cpp_f16;

  im.x.resize(size_t(T * d));
  im.xn.resize(size_t(T * d));
  im.q.resize(size_t(T * q_dim));
  im.k.resize(size_t(T * kv_dim));
  im.v.resize(size_t(T * kv_dim));
  im.attn.resize(size_t(T * q_dim));
  im.proj.resize(size_t(T * d));
  im.gate.resize(size_t(T * c.ffn_dim));
  im.up.resize(size_t(T * c.ffn_dim));
  for (int64_t t = 0; t < T; ++t) model.token_embedding().DequantizeRow(tokens[size_t(t)], im.x.data() + t * d);

  for (int l = 0; l < c.num_layers; ++l) {
    const LlamaModel::Layer& L = model.layer(l);
    for (int64_t t = 0; t < T; ++t) RmsNorm(im.x.data() + t * d, L.attn_norm.data(), d, c.rms_norm_eps, im.xn.data() + t * d);
    {
      const WeightMatrix* qkv[] = {&L.wq, &L.wk, &L.wv};
      float* qkv_out[] = {im.q.data(), im.k.data(), im.v.data()};
      MatMulGroup(qkv, im.xn.data(), T, qkv_out, &im.pool, &im.q8_scratch);
    }
    if (c.qkv_bias) {  // qwen2: q/k/v biases, added before RoPE as llama.cpp's build_qwen2
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < q_dim; ++i) im.q[size_t(t * q_dim + i)] += L.bq[size_t(i)];
        for (int64_t i = 0; i < kv_dim; ++i) im.k[size_t(t * kv_dim + i)] += L.bk[size_t(i)];
        for (int64_t i = 0; i < kv_dim; ++i) im.v[size_t(t * kv_dim + i)] += L.bv[size_t(i)];
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      RopeAngles angles;
      RopeAnglesAt(c.rope_dims, num_past_ + t, c.rope_freq_base, c.rope_freq_factors, &angles);
      ApplyRope(im.q.data() + t * q_dim, nq, hd, c.rope_dims, angles, c.rope_neox);
      ApplyRope(im.k.data() + t * kv_dim, nkv, hd, c.rope_dims, angles, c.rope_neox);
    }
    if (options_.qkv_observer) {
      LayerQkv seen;
      seen.layer = l;
      seen.first_position = num_past_;
      seen.tokens = T;
      seen.q = im.q.data();
      seen.k = im.k.data();
      seen.v = im.v.data();
      options_.qkv_observer(seen);
    }

    // The chunk's K/V into the followers' caches (shared prefill) and, for a paged prefill chunk, into our own
    // cache, one session per task: encoding (FP8, TQ3 with its rotation) is independent per cache.
    auto store_chunk_kv = [&](bool include_own) -> Status {
      const int64_t tasks = int64_t(followers.size()) + (include_own ? 1 : 0);
      if (tasks == 0) return Status::Ok();
      std::vector<Status> results(static_cast<size_t>(tasks));
      im.pool.ParallelForEach(tasks, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          results[size_t(i)] = i < int64_t(followers.size())
                                   ? followers[size_t(i)]->StoreFollowerKv(l, im.k.data(), im.v.data(), T)
                                   : im.cache->Append(im.seq, l, im.k.data(), im.v.data(), int(T));
        }
      });
      for (Status& st : results) MINIMAKV_RETURN_IF_ERROR(std::move(st));
      return Status::Ok();
    };
    if (dense) {
      MINIMAKV_RETURN_IF_ERROR(store_chunk_kv(false));
      float* kc = im.dense_k[size_t(l)].data() + num_past_ * kv_dim;
      float* vc = im.dense_v[size_t(l)].data() + num_past_ * kv_dim;
      for (int64_t i = 0; i < T * kv_dim; ++i) {
        kc[i] = emulate ? RoundFp16(im.k[size_t(i)]) : im.k[size_t(i)];
        vc[i] = emulate ? RoundFp16(im.v[size_t(i)]) : im.v[size_t(i)];
      }
      if (emulate) for (float& x : im.q) x = RoundFp16(x);
      PromptAttentionArgs args;
      args.q = im.q.data();
      args.k = im.dense_k[size_t(l)].data();
      args.v = im.dense_v[size_t(l)].data();
      args.kv_stride = kv_dim;
      args.tokens = T;
      args.key_offset = num_past_;
      args.num_q_heads = nq;
      args.num_kv_heads = nkv;
      args.head_dim = hd;
      args.sm_scale = sm_scale;
      args.round_weights_fp16 = emulate;
      args.out = im.attn.data();
      PromptAttention(args, &im.pool, &im.attention_scratch);
    } else {
      PagedCache& cache = *im.cache;
      const SeqId seqs[1] = {im.seq};
      if (T == 1) MINIMAKV_RETURN_IF_ERROR(cache.Append(im.seq, l, im.k.data(), im.v.data(), 1));
      const bool have_cache = cache.SeqTokens(im.seq, l) > 0;
      if (have_cache) {
        PagedKvView views[kNumKvFormats];
        int num_views = 0;
        for (int f = 0; f < kNumKvFormats; ++f) {
          if (cache.Pool(KvFormat(f)) == nullptr) continue;
          MINIMAKV_RETURN_IF_ERROR(cache.BuildFormatView(l, seqs, KvFormat(f), &im.view_storage[f], &views[num_views]));
          ++num_views;
        }
        float* out = T == 1 ? im.attn.data() : (im.cache_out.resize(size_t(T * q_dim)), im.cache_out.data());
        im.cache_lse.resize(size_t(T * nq));
        const int32_t q_indptr[2] = {0, int32_t(T)};
        AttentionQueries queries;
        queries.q = im.q.data();
        queries.q_indptr = q_indptr;
        queries.num_seqs = 1;
        queries.num_q_heads = nq;
        queries.sm_scale = sm_scale;
        MINIMAKV_RETURN_IF_ERROR(im.AttendCacheSplit(std::span<const PagedKvView>(views, size_t(num_views)), queries,
                                                     &cache.rotation(), T * nq, hd, out, im.cache_lse.data()));
      }
      if (T > 1) {
        // The cache part above read the cache as it was; the chunk's own part below reads im.k / im.v.
        MINIMAKV_RETURN_IF_ERROR(store_chunk_kv(true));
        // Causal attention inside the chunk on full-precision K/V, merged with the cached part.
        im.chunk_lse.resize(size_t(T * nq));
        PromptAttentionArgs args;
        args.q = im.q.data();
        args.k = im.k.data();
        args.v = im.v.data();
        args.kv_stride = kv_dim;
        args.tokens = T;
        args.key_offset = 0;
        args.num_q_heads = nq;
        args.num_kv_heads = nkv;
        args.head_dim = hd;
        args.sm_scale = sm_scale;
        args.out = im.attn.data();
        args.lse_log2 = im.chunk_lse.data();
        PromptAttention(args, &im.pool, &im.attention_scratch);
        if (have_cache) {
          im.pool.ParallelFor(T * nq, 16, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
              MergePartialState(im.attn.data() + i * hd, &im.chunk_lse[size_t(i)], im.cache_out.data() + i * hd,
                                im.cache_lse[size_t(i)], hd);
            }
          });
        }
      }
    }

    MatMul(L.wo, im.attn.data(), T, im.proj.data(), &im.pool, &im.q8_scratch);
    for (int64_t i = 0; i < T * d; ++i) im.x[size_t(i)] += im.proj[size_t(i)];
    for (int64_t t = 0; t < T; ++t) RmsNorm(im.x.data() + t * d, L.ffn_norm.data(), d, c.rms_norm_eps, im.xn.data() + t * d);
    {
      const WeightMatrix* gate_up[] = {&L.w_gate, &L.w_up};
      float* gate_up_out[] = {im.gate.data(), im.up.data()};
      MatMulGroup(gate_up, im.xn.data(), T, gate_up_out, &im.pool, &im.q8_scratch);
    }
    for (int64_t i = 0; i < T * c.ffn_dim; ++i) {
      const float g = im.gate[size_t(i)];
      im.gate[size_t(i)] = g / (1.0f + std::exp(-g)) * im.up[size_t(i)];  // SwiGLU: silu(gate) * up
    }
    MatMul(L.w_down, im.gate.data(), T, im.proj.data(), &im.pool, &im.q8_scratch);
    for (int64_t i = 0; i < T * d; ++i) im.x[size_t(i)] += im.proj[size_t(i)];
  }

  const int64_t first = all_logits ? 0 : T - 1;
  const int64_t rows = T - first;
  for (int64_t t = first; t < T; ++t) {
    RmsNorm(im.x.data() + t * d, model.output_norm().data(), d, c.rms_norm_eps, im.xn.data() + (t - first) * d);
  }
  logits->resize(size_t(rows * c.vocab_size));
  MatMul(model.output(), im.xn.data(), rows, logits->data(), &im.pool, &im.q8_scratch);
  num_past_ += T;
  return Status::Ok();
}

KvAccounting InferenceSession::Accounting() const {
  if (impl_->cache) return impl_->cache->Accounting();
  return KvAccounting();
}

double InferenceSession::KvBytesPerToken() const {
  const LlamaConfig& c = impl_->model->config();
  if (!impl_->cache) return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * sizeof(float);
  return impl_->cache->Accounting().bytes_per_live_token;
}

double InferenceSession::CompressionVsBf16() const {
  if (!impl_->cache) return 0.5;  // fp32 is half as compact as bf16
  return impl_->cache->Accounting().compression_vs_bf16;
}

}  // namespace minimakv
