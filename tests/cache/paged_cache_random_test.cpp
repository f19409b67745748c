// Model-based randomized test of PagedCache (leveldb style): the real cache and a plain dense model (fp32
// K/V per sequence and layer, pins) run the same random operations side by side -- append, fork, free,
// pin, retention, views -- on small pools that fill up. After every operation: shapes, ref counts against
// a recount from all block tables, pool invariants, retention invariants, and Accounting() against a
// from-scratch recount. Every few operations: every live token decodes to exactly what the codecs give
// (FP8 round trip, TQ3 of the FP8 round trip, BF16 rounding) and within the codec error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/paged_cache.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

// Codec tolerances. E4M3 has 3 mantissa bits: relative rounding error <= 2^-4 for normal codes; the
// subnormal step is 2^-9 (in units of the scale), so absolute error <= scale * 2^-10 below that.
constexpr float kFp8RelativeBound = 1.0f / 16.0f;
constexpr float kFp8SubnormalHalfStep = 1.0f / 1024.0f;
// TQ3 (3-bit Lloyd-Max in the Hadamard domain): expected NMSE 0.0345 (../shared/MINIMA-KV.md part 5).
constexpr double kTq3MaxVectorRelativeError = 0.5;
constexpr double kTq3MaxMeanNmse = 0.05;
constexpr double kTq3MaxVectorRelativeErrorVsOriginal = 0.55;  // adds the FP8 step before TQ3

struct ModelSequence {
  std::vector<std::vector<float>> k, v;  // [layer] -> [tokens][kv_heads][head_dim], the appended fp32 values
  std::vector<TokenRange> pins;
  // Expected decodes, memoized so the checks stay fast: FP8 round trip (at append) and TQ3 of that
  // (on first need; tq3_ready[layer][token]).
  std::vector<std::vector<float>> fp8_k, fp8_v, tq3_k, tq3_v;
  std::vector<std::vector<uint8_t>> tq3_ready;
};

struct RandomSpec {
  CacheConfig config;
  int operations = 0;
  int min_sequences = 8;
  int max_sequences = 14;
  int max_append_tokens = 16;
  int decode_check_every = 40;
  uint64_t seed = 1;
};

struct Counters {
  int appends = 0, appends_pool_full = 0, appends_non_finite = 0, copy_on_write = 0;
  int forks = 0, frees = 0, pins = 0, retentions = 0, views = 0, decode_checks = 0;
  int ops_with_stale_kept_hot = 0, ops_with_shared_tq3 = 0, ops_with_tq3_pool_full = 0;
  int64_t tq3_vectors = 0, fp8_vectors = 0, bf16_vectors = 0;
};

class CacheModelRunner {
 public:
  explicit CacheModelRunner(const RandomSpec& spec) : spec_(spec), rng_(spec.seed) {
    const Status status = PagedCache::Create(spec.config, &cache_);
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_TRUE(HadamardRotation::Create(spec.config.head_dim, spec.config.rotation_seed, &rotation_).ok());
  }

  void Run() {
    const CacheConfig& c = spec_.config;
    for (op_ = 0; op_ < spec_.operations; ++op_) {
      const int live = int(model_.size());
      const int dice = Uniform(0, 99);
      if (live < spec_.min_sequences || (dice < 4 && live < spec_.max_sequences)) {
        DoAdd();
      } else if (dice < 62) {
        DoAppend(RandomSeq(), Uniform(0, c.num_layers - 1));
      } else if (dice < 70) {
        if (live < spec_.max_sequences) DoFork(RandomSeq());
      } else if (dice < 76) {
        DoFree(dice < 73 ? LongestSeq() : RandomSeq());
      } else if (dice < 82) {
        DoPin(RandomSeq());
      } else if (dice < 90) {
        DoRetention(RandomSeq());
      } else {
        DoViews();
      }
      CheckInvariants();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
        ADD_FAILURE() << "first failure at operation " << op_ << " (seed " << spec_.seed << ")";
        return;
      }
      if (op_ % spec_.decode_check_every == 0) CheckDecode();
    }
    CheckDecode();
    for (SeqId seq : cache_->Sequences()) ASSERT_TRUE(cache_->Free(seq).ok());
    model_.clear();
    CheckInvariants();
    for (int f = 0; f < kNumKvFormats; ++f) {
      if (const PagePool* pool = cache_->Pool(KvFormat(f))) {
        EXPECT_EQ(pool->free_pages(), pool->capacity_pages());
      }
    }
    EXPECT_EQ(cache_->Accounting().total_bytes, 0u);
  }

  const Counters& counters() const { return counters_; }
  double tq3_mean_nmse() const { return tq3_nmse_count_ == 0 ? 0.0 : tq3_nmse_sum_ / double(tq3_nmse_count_); }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  SeqId RandomSeq() {
    auto it = model_.begin();
    std::advance(it, Uniform(0, int(model_.size()) - 1));
    return it->first;
  }
  SeqId LongestSeq() const {
    SeqId best = model_.begin()->first;
    size_t best_tokens = 0;
    for (const auto& [id, seq] : model_) {
      size_t tokens = 0;
      for (const auto& layer : seq.k) tokens += layer.size();
      if (tokens > best_tokens) best = id, best_tokens = tokens;
    }
    return best;
  }
  size_t VectorFloats() const { return size_t(spec_.config.kv_heads) * spec_.config.head_dim; }

  void DoAdd() {
    SeqId id = -1;
    ASSERT_TRUE(cache_->AddSequence(&id).ok());
    ASSERT_EQ(model_.count(id), 0u);
    ModelSequence seq;
    for (auto* layers : {&seq.k, &seq.v, &seq.fp8_k, &seq.fp8_v, &seq.tq3_k, &seq.tq3_v}) {
      layers->resize(size_t(spec_.config.num_layers));
    }
    seq.tq3_ready.resize(size_t(spec_.config.num_layers));
    model_.emplace(id, std::move(seq));
  }

  // Everything an append may not change when it fails.
  struct State {
    std::vector<uint8_t> bytes;
    std::vector<int32_t> lists;
    std::vector<PageRef> tables;
    std::vector<int64_t> tokens;
    KvAccounting accounting;
    bool operator==(const State&) const = default;
  };
  State Capture() const {
    State state;
    for (int f = 0; f < kNumKvFormats; ++f) {
      const PagePool* pool = cache_->Pool(KvFormat(f));
      if (pool == nullptr) continue;
      state.bytes.insert(state.bytes.end(), pool->base(), pool->base() + size_t(pool->capacity_pages()) * pool->page_bytes());
      for (int32_t p : pool->FreeListTopFirst()) state.lists.push_back(p);
      for (int32_t p = 0; p < pool->capacity_pages(); ++p) state.lists.push_back(pool->ref_count(p));
    }
    for (SeqId seq : cache_->Sequences()) {
      for (int layer = 0; layer < spec_.config.num_layers; ++layer) {
        const BlockTable* table = cache_->Table(seq, layer);
        state.tables.insert(state.tables.end(), table->pages.begin(), table->pages.end());
        state.tokens.push_back(table->num_tokens);
      }
    }
    state.accounting = cache_->Accounting();
    return state;
  }

  void DoAppend(SeqId seq, int layer) {
    const CacheConfig& c = spec_.config;
    const int n = Uniform(1, spec_.max_append_tokens);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> k(size_t(n) * VectorFloats()), v(k.size());
    // Keys with a few large channels, as real keys have (outliers stress the per-vector scales).
    for (size_t i = 0; i < k.size(); ++i) {
      const bool outlier = (i % size_t(c.head_dim)) % 17 == 3;
      k[i] = normal(rng_) * (outlier ? 8.0f : 1.0f);
      v[i] = normal(rng_);
    }
    const bool inject = Uniform(0, 99) < 2;
    if (inject) {
      const size_t at = size_t(Uniform(0, int(k.size()) - 1));
      (Uniform(0, 1) ? k : v)[at] = Uniform(0, 1) ? std::numeric_limits<float>::quiet_NaN()
                                                 : -std::numeric_limits<float>::infinity();
    }
    // Pages this append needs, from the table and the pool (independent of the cache's own arithmetic).
    const BlockTable* table = cache_->Table(seq, layer);
    const PagePool* hot = cache_->Pool(ModelHotFormat(layer));
    const int64_t tokens = table->num_tokens;
    const bool partial = tokens % c.page_tokens != 0;
    const bool shared_partial = partial && hot->ref_count(table->pages.back().page_id) > 1;
    const int64_t needed = (tokens + n + c.page_tokens - 1) / c.page_tokens - int64_t(table->pages.size()) +
                           (shared_partial ? 1 : 0);
    const bool expect_full = !inject && needed > hot->free_pages();
    const State before = (inject || expect_full) ? Capture() : State{};

    const Status status = cache_->Append(seq, layer, k.data(), v.data(), n);
    if (inject) {
      ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
      EXPECT_TRUE(status.message().find("NaN") != std::string::npos ||
                  status.message().find("Inf") != std::string::npos) << status.message();
      EXPECT_TRUE(Capture() == before) << "a rejected append changed the cache";
      ++counters_.appends_non_finite;
      return;
    }
    if (expect_full) {
      ASSERT_EQ(status.code(), StatusCode::kResourceExhausted) << status.ToString();
      EXPECT_TRUE(Capture() == before) << "a failed append changed the cache";
      ++counters_.appends_pool_full;
      return;
    }
    ASSERT_TRUE(status.ok()) << status.ToString();
    if (shared_partial) ++counters_.copy_on_write;
    ++counters_.appends;
    ModelSequence& m = model_.at(seq);
    const size_t l = size_t(layer);
    m.k[l].insert(m.k[l].end(), k.begin(), k.end());
    m.v[l].insert(m.v[l].end(), v.begin(), v.end());
    const std::vector<float> fp8_k = Fp8RoundTrip(k), fp8_v = Fp8RoundTrip(v);
    m.fp8_k[l].insert(m.fp8_k[l].end(), fp8_k.begin(), fp8_k.end());
    m.fp8_v[l].insert(m.fp8_v[l].end(), fp8_v.begin(), fp8_v.end());
    m.tq3_k[l].resize(m.k[l].size());
    m.tq3_v[l].resize(m.v[l].size());
    m.tq3_ready[l].resize(size_t(table->num_tokens), 0);
  }

  // Fp8EncodeVector + Fp8DecodeVector of every head vector of x.
  std::vector<float> Fp8RoundTrip(const std::vector<float>& x) const {
    const int d = spec_.config.head_dim;
    std::vector<float> out(x.size());
    std::vector<uint8_t> codes(static_cast<size_t>(d));
    for (size_t at = 0; at < x.size(); at += size_t(d)) {
      float scale = 0.0f;
      EXPECT_TRUE(Fp8EncodeVector(x.data() + at, d, codes.data(), &scale).ok());
      Fp8DecodeVector(codes.data(), scale, d, out.data() + at);
    }
    return out;
  }

  void DoFork(SeqId parent) {
    SeqId child = -1;
    ASSERT_TRUE(cache_->Fork(parent, &child).ok());
    ModelSequence copy = model_.at(parent);
    model_.emplace(child, std::move(copy));
    ++counters_.forks;
  }

  void DoFree(SeqId seq) {
    ASSERT_TRUE(cache_->Free(seq).ok());
    model_.erase(seq);
    ++counters_.frees;
  }

  void DoPin(SeqId seq) {
    const int64_t tokens = int64_t(model_.at(seq).k[0].size() / VectorFloats());
    const int64_t begin = Uniform(0, int(tokens) + spec_.config.page_tokens);
    const int64_t end = begin + Uniform(1, 2 * spec_.config.page_tokens);
    ASSERT_TRUE(cache_->Pin(seq, begin, end).ok());
    model_.at(seq).pins.push_back(TokenRange{begin, end});
    ++counters_.pins;
  }

  bool ModelProtected(const ModelSequence& m, int64_t page_begin) const {
    const int64_t page_end = page_begin + spec_.config.page_tokens;
    if (page_begin < spec_.config.policy.anchor_tokens) return true;
    for (const TokenRange& pin : m.pins) {
      if (pin.begin_token < page_end && page_begin < pin.end_token) return true;
    }
    return false;
  }

  void DoRetention(SeqId seq) {
    const CacheConfig& c = spec_.config;
    ASSERT_TRUE(cache_->ApplyRetention(seq).ok());
    ++counters_.retentions;
    const PagePool* tq3 = cache_->Pool(KvFormat::kTq3);
    if (tq3 == nullptr || tq3->free_pages() == 0) return;
    // The TQ3 pool still has room, so every stale unprotected page of seq's FP8 layers must be TQ3 now.
    const ModelSequence& m = model_.at(seq);
    for (int layer = 0; layer < c.num_layers; ++layer) {
      if (ModelHotFormat(layer) != KvFormat::kFp8) continue;
      const BlockTable* table = cache_->Table(seq, layer);
      for (size_t i = 0; i < table->pages.size(); ++i) {
        const int64_t page_begin = int64_t(i) * c.page_tokens;
        const bool stale = page_begin + c.page_tokens <= table->num_tokens - c.policy.recent_tokens;
        if (stale && !ModelProtected(m, page_begin)) {
          EXPECT_EQ(table->pages[i].format, KvFormat::kTq3) << "seq " << seq << " layer " << layer << " page " << i;
        }
      }
    }
  }

  void DoViews() {
    const CacheConfig& c = spec_.config;
    std::vector<SeqId> batch;
    const int batch_size = Uniform(1, 5);
    for (int i = 0; i < batch_size; ++i) batch.push_back(RandomSeq());
    const int layer = Uniform(0, c.num_layers - 1);
    ++counters_.views;
    std::vector<float> k(VectorFloats()), v(VectorFloats()), raw(static_cast<size_t>(c.head_dim));
    for (int f = 0; f < kNumKvFormats; ++f) {
      FormatViewStorage storage;
      PagedKvView view;
      ASSERT_TRUE(cache_->BuildFormatView(layer, batch, KvFormat(f), &storage, &view).ok());
      ASSERT_EQ(view.num_seqs, batch_size);
      EXPECT_EQ(view.pages, cache_->PoolBase(KvFormat(f)));
      ASSERT_EQ(storage.page_indptr.size(), size_t(batch_size) + 1);
      for (int s = 0; s < batch_size; ++s) {
        const BlockTable* table = cache_->Table(batch[size_t(s)], layer);
        std::vector<int32_t> expected_ids;
        std::vector<size_t> logical;
        int64_t expected_tokens = 0;
        for (size_t i = 0; i < table->pages.size(); ++i) {
          if (int(table->pages[i].format) != f) continue;
          expected_ids.push_back(table->pages[i].page_id);
          logical.push_back(i);
          expected_tokens += table->ValidTokens(i, c.page_tokens);
        }
        const std::vector<int32_t> ids(storage.page_ids.begin() + storage.page_indptr[size_t(s)],
                                       storage.page_ids.begin() + storage.page_indptr[size_t(s) + 1]);
        EXPECT_EQ(ids, expected_ids);
        EXPECT_EQ(ViewSeqTokens(view, s), expected_tokens);
        // The first token of each listed page, read through the view's raw memory, is that logical token.
        for (size_t j = 0; j < ids.size(); ++j) {
          const uint8_t* page = view.pages + size_t(ids[j]) * view.layout.page_bytes();
          const int64_t token = int64_t(logical[j]) * c.page_tokens;
          ASSERT_TRUE(cache_->DecodeToken(batch[size_t(s)], layer, token, k.data(), v.data()).ok());
          DecodeRawK(KvFormat(f), view.layout, page, raw.data());
          for (int i = 0; i < c.head_dim; ++i) ASSERT_EQ(raw[size_t(i)], k[size_t(i)]) << "format " << f;
        }
      }
    }
  }

  // K of head 0, slot 0 of a page, decoded straight from its bytes.
  void DecodeRawK(KvFormat format, const PageLayout& layout, const uint8_t* page, float* out) const {
    const uint8_t* codes = page + layout.k_codes_offset(0, 0);
    const uint8_t* scale = page + layout.k_scale_offset(0, 0);
    if (format == KvFormat::kBf16) {
      std::vector<uint16_t> values(size_t(layout.head_dim));
      std::memcpy(values.data(), codes, values.size() * sizeof(uint16_t));
      Bf16DecodeVector(values.data(), layout.head_dim, out);
    } else if (format == KvFormat::kFp8) {
      float s = 0.0f;
      std::memcpy(&s, scale, sizeof(float));
      Fp8DecodeVector(codes, s, layout.head_dim, out);
    } else {
      uint16_t s = 0;
      std::memcpy(&s, scale, sizeof(uint16_t));
      Tq3DecodeVector(rotation_, codes, s, out);
    }
  }

  void CheckInvariants() {
    const CacheConfig& c = spec_.config;
    std::vector<SeqId> expected_ids;
    for (const auto& [id, seq] : model_) expected_ids.push_back(id);
    ASSERT_EQ(cache_->Sequences(), expected_ids);

    // Ref counts recounted from every block table; shared pages agree on their valid tokens.
    std::vector<int32_t> refs[kNumKvFormats];
    std::vector<int32_t> valid_seen[kNumKvFormats];
    for (int f = 0; f < kNumKvFormats; ++f) {
      if (const PagePool* pool = cache_->Pool(KvFormat(f))) {
        refs[f].assign(size_t(pool->capacity_pages()), 0);
        valid_seen[f].assign(size_t(pool->capacity_pages()), -1);
      }
    }
    for (const auto& [id, m] : model_) {
      for (int layer = 0; layer < c.num_layers; ++layer) {
        const BlockTable* table = cache_->Table(id, layer);
        ASSERT_NE(table, nullptr);
        const int64_t tokens = int64_t(m.k[size_t(layer)].size() / VectorFloats());
        ASSERT_EQ(table->num_tokens, tokens) << "seq " << id << " layer " << layer;
        ASSERT_EQ(int64_t(table->pages.size()), (tokens + c.page_tokens - 1) / c.page_tokens);
        for (size_t i = 0; i < table->pages.size(); ++i) {
          const PageRef page = table->pages[i];
          const int f = int(page.format);
          // Each layer holds its own hot format, plus TQ3 where that is FP8 (BF16 is never converted).
          const KvFormat hot = ModelHotFormat(layer);
          ASSERT_TRUE(page.format == hot || (hot == KvFormat::kFp8 && page.format == KvFormat::kTq3))
              << "seq " << id << " layer " << layer << " page " << i << " is " << KvFormatName(page.format);
          ASSERT_TRUE(page.page_id >= 0 && size_t(page.page_id) < refs[f].size());
          ++refs[f][size_t(page.page_id)];
          const int valid = table->ValidTokens(i, c.page_tokens);
          int32_t& seen = valid_seen[f][size_t(page.page_id)];
          ASSERT_TRUE(seen == -1 || seen == valid) << "shared page with different lengths";
          seen = valid;
          if (page.format == KvFormat::kTq3) {
            // Only full pages wholly before the recent window, outside the anchors, are ever converted.
            const int64_t page_begin = int64_t(i) * c.page_tokens;
            EXPECT_LE(page_begin + c.page_tokens, tokens - c.policy.recent_tokens) << "TQ3 page in the recent window";
            EXPECT_GE(page_begin, c.policy.anchor_tokens) << "TQ3 anchor page";
          }
        }
      }
    }
    bool shared_tq3 = false;
    for (int f = 0; f < kNumKvFormats; ++f) {
      const PagePool* pool = cache_->Pool(KvFormat(f));
      if (pool == nullptr) continue;
      int32_t live = 0;
      for (int32_t p = 0; p < pool->capacity_pages(); ++p) {
        ASSERT_EQ(pool->ref_count(p), refs[f][size_t(p)]) << "format " << f << " page " << p;
        live += refs[f][size_t(p)] > 0;
        if (f == int(KvFormat::kTq3) && refs[f][size_t(p)] > 1) shared_tq3 = true;
      }
      ASSERT_EQ(pool->live_pages(), live);
      ASSERT_EQ(pool->free_pages() + live, pool->capacity_pages()) << "page leak in format " << f;
      const std::vector<int32_t> free_list = pool->FreeListTopFirst();
      const std::set<int32_t> unique(free_list.begin(), free_list.end());
      ASSERT_EQ(unique.size(), free_list.size()) << "page on the free list twice";
      for (int32_t p : free_list) ASSERT_EQ(refs[f][size_t(p)], 0) << "live page " << p << " on the free list";
    }
    const KvAccounting actual = cache_->Accounting();
    const KvAccounting expected = Recount();
    ASSERT_TRUE(actual == expected) << "cache:\n" << actual.ToString() << "recount:\n" << expected.ToString();
    counters_.ops_with_stale_kept_hot += actual.stale_kept_hot_token_layers > 0 && c.hot_format == KvFormat::kFp8;
    counters_.ops_with_shared_tq3 += shared_tq3;
    const PagePool* tq3 = cache_->Pool(KvFormat::kTq3);
    counters_.ops_with_tq3_pool_full += tq3 != nullptr && tq3->free_pages() == 0;
  }

  // The format a layer's new tokens must land in, from the config's lists (not the cache's own table).
  KvFormat ModelHotFormat(int layer) const {
    const std::vector<int>& bf16 = spec_.config.bf16_layers;
    return std::find(bf16.begin(), bf16.end(), layer) != bf16.end() ? KvFormat::kBf16 : spec_.config.hot_format;
  }

  // Accounting from scratch: the model's pins and policy, the tables' page ids (kv_accounting.h rules).
  KvAccounting Recount() const {
    const CacheConfig& c = spec_.config;
    KvAccounting acc;
    acc.num_layers = c.num_layers;
    acc.kv_heads = c.kv_heads;
    acc.head_dim = c.head_dim;
    acc.num_sequences = int64_t(model_.size());
    std::map<std::pair<int, int32_t>, std::pair<int, int>> pages;  // (format, id) -> (valid, tier 0/1/2)
    for (const auto& [id, m] : model_) {
      for (int layer = 0; layer < c.num_layers; ++layer) {
        const BlockTable* table = cache_->Table(id, layer);
        const int64_t n = table->num_tokens;
        acc.logical_token_layers += n;
        acc.metadata_bytes += table->pages.size() * sizeof(PageRef);
        for (size_t i = 0; i < table->pages.size(); ++i) {
          const int64_t begin = int64_t(i) * c.page_tokens;
          const int valid = int(std::min<int64_t>(c.page_tokens, n - begin));
          int tier = 0;
          if (valid < c.page_tokens || begin + valid > n - c.policy.recent_tokens) {
            tier = 2;
          } else if (ModelProtected(m, begin)) {
            tier = 1;
          }
          auto [it, inserted] = pages.try_emplace({int(table->pages[i].format), table->pages[i].page_id}, valid, tier);
          if (!inserted) it->second.second = std::max(it->second.second, tier);
        }
      }
    }
    size_t page_bytes_total = 0;
    for (int f = 0; f < kNumKvFormats; ++f) {
      const PagePool* pool = cache_->Pool(KvFormat(f));
      if (pool == nullptr) continue;
      FormatAccounting& fa = acc.formats[f];
      const PageLayout layout = cache_->Layout(KvFormat(f));
      fa.capacity_pages = pool->capacity_pages();
      fa.page_bytes = layout.page_bytes();
      for (const auto& [key, info] : pages) {
        if (key.first != f) continue;
        ++fa.live_pages;
        fa.token_layers += info.first;
        if (KvFormat(f) == KvFormat::kTq3) {
          acc.stale_tq3_token_layers += info.first;
        } else if (info.second == 2) {
          acc.recent_token_layers += info.first;
        } else if (info.second == 1) {
          acc.anchor_token_layers += info.first;
        } else {
          acc.stale_kept_hot_token_layers += info.first;
        }
      }
      fa.live_bytes = size_t(fa.live_pages) * fa.page_bytes;
      fa.code_bytes = size_t(fa.token_layers) * 2 * c.kv_heads * CodeBytesPerVector(KvFormat(f), c.head_dim);
      fa.scale_bytes = size_t(fa.token_layers) * 2 * c.kv_heads * ScaleBytesPerVector(KvFormat(f));
      fa.slack_bytes = fa.live_bytes - fa.code_bytes - fa.scale_bytes;
      acc.stored_token_layers += fa.token_layers;
      acc.code_bytes += fa.code_bytes;
      acc.scale_bytes += fa.scale_bytes;
      acc.slack_bytes += fa.slack_bytes;
      page_bytes_total += fa.live_bytes;
    }
    acc.total_bytes = page_bytes_total + acc.metadata_bytes;
    if (acc.stored_token_layers > 0) {
      acc.bytes_per_live_token = double(acc.total_bytes) / (double(acc.stored_token_layers) / c.num_layers);
      const double values = double(acc.stored_token_layers) * 2.0 * c.kv_heads * c.head_dim;
      acc.compression_vs_bf16 = values * 2.0 / double(acc.total_bytes);
      acc.compression_vs_fp8 = values * 1.0 / double(acc.total_bytes);
    }
    return acc;
  }

  void CheckDecode() {
    const CacheConfig& c = spec_.config;
    const int d = c.head_dim;
    ++counters_.decode_checks;
    std::vector<float> k(VectorFloats()), v(VectorFloats());
    std::vector<uint8_t> tq3_codes(size_t(Tq3CodeBytes(d)));
    for (auto& [id, m] : model_) {
      for (int layer = 0; layer < c.num_layers; ++layer) {
        const size_t l = size_t(layer);
        const BlockTable* table = cache_->Table(id, layer);
        for (int64_t t = 0; t < table->num_tokens; ++t) {
          ASSERT_TRUE(cache_->DecodeToken(id, layer, t, k.data(), v.data()).ok());
          const KvFormat format = table->pages[size_t(t / c.page_tokens)].format;
          if (format == KvFormat::kTq3 && !m.tq3_ready[l][size_t(t)]) {
            // The documented conversion: TQ3 encode of the FP8-decoded vector.
            for (size_t at = size_t(t) * VectorFloats(); at < size_t(t + 1) * VectorFloats(); at += size_t(d)) {
              for (int part = 0; part < 2; ++part) {
                uint16_t scale = 0;
                const float* fp8 = (part ? m.fp8_v : m.fp8_k)[l].data() + at;
                ASSERT_TRUE(Tq3EncodeVector(rotation_, fp8, tq3_codes.data(), &scale).ok());
                Tq3DecodeVector(rotation_, tq3_codes.data(), scale, (part ? m.tq3_v : m.tq3_k)[l].data() + at);
              }
            }
            m.tq3_ready[l][size_t(t)] = 1;
          }
          for (int h = 0; h < c.kv_heads; ++h) {
            for (int part = 0; part < 2; ++part) {
              const size_t at = (size_t(t) * c.kv_heads + h) * d;
              const float* decoded = (part ? v : k).data() + size_t(h) * d;
              CheckVector(format, (part ? m.v : m.k)[l].data() + at, (part ? m.fp8_v : m.fp8_k)[l].data() + at,
                          (part ? m.tq3_v : m.tq3_k)[l].data() + at, decoded);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }

  // decoded must equal the codec's output bit for bit and lie within the codec's error bounds.
  void CheckVector(KvFormat format, const float* original, const float* fp8, const float* tq3, const float* decoded) {
    const int d = spec_.config.head_dim;
    if (format == KvFormat::kBf16) {
      ++counters_.bf16_vectors;
      for (int i = 0; i < d; ++i) ASSERT_EQ(decoded[i], Bf16ToFloat(FloatToBf16(original[i]))) << i;
      return;
    }
    if (format == KvFormat::kFp8) {
      ++counters_.fp8_vectors;
      float amax = 0.0f;
      for (int i = 0; i < d; ++i) amax = std::max(amax, std::fabs(original[i]));
      const float scale = amax / kE4m3MaxFinite;
      for (int i = 0; i < d; ++i) {
        ASSERT_EQ(decoded[i], fp8[i]) << "coordinate " << i;
        ASSERT_LE(std::fabs(decoded[i] - original[i]),
                  std::fabs(original[i]) * kFp8RelativeBound + scale * kFp8SubnormalHalfStep) << i;
      }
      return;
    }
    ++counters_.tq3_vectors;
    double error_sq = 0.0, reference_sq = 0.0, original_error_sq = 0.0, original_sq = 0.0;
    for (int i = 0; i < d; ++i) {
      ASSERT_EQ(decoded[i], tq3[i]) << "coordinate " << i;  // conversion = TQ3(FP8(x)) exactly
      error_sq += double(decoded[i] - fp8[i]) * (decoded[i] - fp8[i]);
      reference_sq += double(fp8[i]) * fp8[i];
      original_error_sq += double(decoded[i] - original[i]) * (decoded[i] - original[i]);
      original_sq += double(original[i]) * original[i];
    }
    ASSERT_LT(std::sqrt(error_sq / reference_sq), kTq3MaxVectorRelativeError);
    ASSERT_LT(std::sqrt(original_error_sq / original_sq), kTq3MaxVectorRelativeErrorVsOriginal);
    tq3_nmse_sum_ += error_sq / reference_sq;
    ++tq3_nmse_count_;
  }

  RandomSpec spec_;
  std::mt19937_64 rng_;
  std::unique_ptr<PagedCache> cache_;
  HadamardRotation rotation_;
  std::map<SeqId, ModelSequence> model_;
  Counters counters_;
  int op_ = 0;
  double tq3_nmse_sum_ = 0.0;  // per-vector NMSE of TQ3 vs its FP8 input, summed over every check
  int64_t tq3_nmse_count_ = 0;
};

CacheConfig SmallConfig(KvFormat hot, int page_tokens, int head_dim, int kv_heads, int hot_pages, int tq3_pages) {
  CacheConfig config;
  config.num_layers = 2;
  config.kv_heads = kv_heads;
  config.head_dim = head_dim;
  config.page_tokens = page_tokens;
  config.hot_format = hot;
  PageLayout layout{hot, kv_heads, head_dim, page_tokens};
  config.pool_bytes[int(hot)] = size_t(hot_pages) * layout.page_bytes();
  layout.format = KvFormat::kTq3;
  config.pool_bytes[int(KvFormat::kTq3)] = size_t(tq3_pages) * layout.page_bytes();
  config.policy.recent_tokens = 2 * page_tokens;
  config.policy.anchor_tokens = page_tokens;
  config.rotation_seed = 0x5EEDull;
  return config;
}

void Report(const char* name, const Counters& n, double nmse) {
  std::printf(
      "[%s] appends %d (pool full %d, non-finite %d, copy-on-write %d), forks %d, frees %d, pins %d, "
      "retentions %d, views %d, decode checks %d; ops with: stale kept FP8 %d, shared TQ3 page %d, TQ3 pool full "
      "%d; vectors checked fp8 %lld tq3 %lld bf16 %lld; TQ3 mean NMSE vs FP8 %.4f\n",
      name, n.appends, n.appends_pool_full, n.appends_non_finite, n.copy_on_write, n.forks, n.frees, n.pins,
      n.retentions, n.views, n.decode_checks, n.ops_with_stale_kept_hot, n.ops_with_shared_tq3,
      n.ops_with_tq3_pool_full, (long long)n.fp8_vectors, (long long)n.tq3_vectors, (long long)n.bf16_vectors, nmse);
}

TEST(PagedCacheRandomized, Fp8Tq3TenThousandOperationsMatchTheDenseModel) {
  RandomSpec spec;
  spec.config = SmallConfig(KvFormat::kFp8, /*page_tokens=*/4, /*head_dim=*/64, /*kv_heads=*/2,
                            /*hot_pages=*/130, /*tq3_pages=*/110);
  spec.operations = 10000;
  spec.seed = 20261129;
  CacheModelRunner runner(spec);
  runner.Run();
  const Counters& n = runner.counters();
  Report("fp8/tq3 P=4", n, runner.tq3_mean_nmse());
  // The run must have exercised every interesting path, or it proves little.
  EXPECT_GT(n.appends_pool_full, 0);
  EXPECT_GT(n.appends_non_finite, 0);
  EXPECT_GT(n.copy_on_write, 0);
  EXPECT_GT(n.ops_with_stale_kept_hot, 0);
  EXPECT_GT(n.ops_with_shared_tq3, 0);
  EXPECT_GT(n.ops_with_tq3_pool_full, 0);
  EXPECT_GT(n.tq3_vectors, 10000);
  EXPECT_LT(runner.tq3_mean_nmse(), kTq3MaxMeanNmse);
}

TEST(PagedCacheRandomized, Fp8Tq3LargerPagesAndHeadDim128) {
  RandomSpec spec;
  spec.config = SmallConfig(KvFormat::kFp8, /*page_tokens=*/8, /*head_dim=*/128, /*kv_heads=*/1,
                            /*hot_pages=*/110, /*tq3_pages=*/40);
  spec.operations = 3000;
  spec.max_append_tokens = 24;
  spec.seed = 77;
  CacheModelRunner runner(spec);
  runner.Run();
  Report("fp8/tq3 P=8 d=128", runner.counters(), runner.tq3_mean_nmse());
  EXPECT_GT(runner.counters().tq3_vectors, 1000);
  EXPECT_LT(runner.tq3_mean_nmse(), kTq3MaxMeanNmse);
}

// A BF16 layer beside an FP8 layer converting to TQ3 (CacheConfig::bf16_layers; Qwen2.5's outlier layers): each
// layer's pages stay in its own format, both pools fill up, accounting counts both.
TEST(PagedCacheRandomized, Bf16LayerBesideAnFp8Tq3Layer) {
  RandomSpec spec;
  spec.config = SmallConfig(KvFormat::kFp8, /*page_tokens=*/4, /*head_dim=*/64, /*kv_heads=*/2,
                            /*hot_pages=*/70, /*tq3_pages=*/60);
  spec.config.bf16_layers = {1};
  const PageLayout bf16_layout{KvFormat::kBf16, 2, 64, 4};
  spec.config.pool_bytes[int(KvFormat::kBf16)] = 80 * bf16_layout.page_bytes();
  spec.operations = 3000;
  spec.seed = 2026120120;
  CacheModelRunner runner(spec);
  runner.Run();
  const Counters& n = runner.counters();
  Report("bf16 layer + fp8/tq3 layer P=4", n, runner.tq3_mean_nmse());
  EXPECT_GT(n.bf16_vectors, 1000);
  EXPECT_GT(n.fp8_vectors, 1000);
  EXPECT_GT(n.tq3_vectors, 1000);
  EXPECT_GT(n.appends_pool_full, 0);
  EXPECT_LT(runner.tq3_mean_nmse(), kTq3MaxMeanNmse);
}

TEST(PagedCacheRandomized, Bf16ControlCacheMatchesTheDenseModel) {
  RandomSpec spec;
  spec.config = SmallConfig(KvFormat::kBf16, /*page_tokens=*/8, /*head_dim=*/64, /*kv_heads=*/2,
                            /*hot_pages=*/120, /*tq3_pages=*/0);
  spec.operations = 2000;
  spec.seed = 99;
  CacheModelRunner runner(spec);
  runner.Run();
  Report("bf16 P=8", runner.counters(), 0.0);
  EXPECT_EQ(runner.counters().tq3_vectors, 0);
  EXPECT_GT(runner.counters().bf16_vectors, 1000);
  EXPECT_GT(runner.counters().appends_pool_full, 0);
}

}  // namespace
}  // namespace minimakv
