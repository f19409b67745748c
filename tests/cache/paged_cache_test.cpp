// Exact-state tests of PagedCache on tiny pools: page ids, ref counts, free-list order, conversion, errors.
#include "minimakv/paged_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

using cache_test::RandomTokens;
using cache_test::Snapshot;

constexpr int kHeadDim = 64;
constexpr int kPageTokens = 4;
// Page sizes for kv_heads = 1, head_dim = 64, page_tokens = 4 (page_layout.h):
constexpr size_t kFp8PageBytes = 576;   // 2 * 4 * (64 + 4) = 544, aligned to 64
constexpr size_t kTq3PageBytes = 256;   // 2 * 4 * (24 + 2) = 208, aligned to 64
constexpr size_t kBf16PageBytes = 1024; // 2 * 4 * 128

CacheConfig TinyConfig(int fp8_pages, int tq3_pages, int recent_tokens, int anchor_tokens) {
  CacheConfig config;
  config.num_layers = 1;
  config.kv_heads = 1;
  config.head_dim = kHeadDim;
  config.page_tokens = kPageTokens;
  config.hot_format = KvFormat::kFp8;
  config.pool_bytes[int(KvFormat::kFp8)] = size_t(fp8_pages) * kFp8PageBytes;
  config.pool_bytes[int(KvFormat::kTq3)] = size_t(tq3_pages) * kTq3PageBytes;
  config.policy.recent_tokens = recent_tokens;
  config.policy.anchor_tokens = anchor_tokens;
  return config;
}

std::unique_ptr<PagedCache> MakeCache(const CacheConfig& config) {
  std::unique_ptr<PagedCache> cache;
  const Status status = PagedCache::Create(config, &cache);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return cache;
}

// Appends n random tokens (seeded) to layer 0 and returns them: [n][kv_heads][head_dim] K then V.
struct Tokens {
  std::vector<float> k, v;
};
Tokens AppendRandom(PagedCache* cache, SeqId seq, int n, uint64_t seed, int layer = 0) {
  const CacheConfig& config = cache->config();
  Tokens tokens{RandomTokens(n, config.kv_heads, config.head_dim, seed),
                RandomTokens(n, config.kv_heads, config.head_dim, seed + 1000003)};
  const Status status = cache->Append(seq, layer, tokens.k.data(), tokens.v.data(), n);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return tokens;
}

std::vector<PageRef> Pages(const PagedCache& cache, SeqId seq, int layer = 0) {
  const BlockTable* table = cache.Table(seq, layer);
  return table == nullptr ? std::vector<PageRef>{} : table->pages;
}

constexpr PageRef Fp8(int32_t id) { return PageRef{KvFormat::kFp8, id}; }
constexpr PageRef Tq3(int32_t id) { return PageRef{KvFormat::kTq3, id}; }
constexpr PageRef Bf16(int32_t id) { return PageRef{KvFormat::kBf16, id}; }

std::vector<float> Fp8RoundTrip(const float* x, int d) {
  std::vector<uint8_t> codes(static_cast<size_t>(d));
  float scale = 0.0f;
  EXPECT_TRUE(Fp8EncodeVector(x, d, codes.data(), &scale).ok());
  std::vector<float> out(static_cast<size_t>(d));
  Fp8DecodeVector(codes.data(), scale, d, out.data());
  return out;
}

// The documented conversion: FP8 decode, then TQ3 encode, then (for comparison) TQ3 decode.
std::vector<float> Tq3OfFp8(const HadamardRotation& rotation, const float* x) {
  const int d = rotation.head_dim();
  const std::vector<float> fp8 = Fp8RoundTrip(x, d);
  std::vector<uint8_t> codes(size_t(Tq3CodeBytes(d)));
  uint16_t scale = 0;
  EXPECT_TRUE(Tq3EncodeVector(rotation, fp8.data(), codes.data(), &scale).ok());
  std::vector<float> out(static_cast<size_t>(d));
  Tq3DecodeVector(rotation, codes.data(), scale, out.data());
  return out;
}

TEST(PagedCacheCreate, RejectsBadConfigsNamingTheField) {
  struct Case {
    const char* field;
    void (*mutate)(CacheConfig*);
  };
  const Case cases[] = {
      {"num_layers", [](CacheConfig* c) { c->num_layers = 0; }},
      // Was accepted: every AddSequence then sized a block table per layer (std::bad_alloc at 2^30 layers).
      {"num_layers = 70000", [](CacheConfig* c) { c->num_layers = 70000; }},
      {"kv_heads", [](CacheConfig* c) { c->kv_heads = -1; }},
      {"head_dim", [](CacheConfig* c) { c->head_dim = 96; }},
      {"page_tokens", [](CacheConfig* c) { c->page_tokens = 0; }},
      {"hot_format", [](CacheConfig* c) { c->hot_format = KvFormat::kTq3; }},
      {"pool_bytes[fp8]", [](CacheConfig* c) { c->pool_bytes[int(KvFormat::kFp8)] = 0; }},
      {"recent_tokens", [](CacheConfig* c) { c->policy.recent_tokens = -1; }},
      {"anchor_tokens", [](CacheConfig* c) { c->policy.anchor_tokens = -2; }},
      {"tq3 pool budget 100", [](CacheConfig* c) { c->pool_bytes[int(KvFormat::kTq3)] = 100; }},
      {"hot_layers entry 1", [](CacheConfig* c) { c->policy.hot_layers = {0, 1}; }},  // one layer: [0, 1)
      {"hot_layers entry -1", [](CacheConfig* c) { c->policy.hot_layers = {-1}; }},
      {"bf16_layers entry 1", [](CacheConfig* c) {
         c->bf16_layers = {1};
         c->pool_bytes[int(KvFormat::kBf16)] = 4 * kBf16PageBytes;
       }},
      {"bf16_layers lists layer 0 but pool_bytes[bf16] = 0", [](CacheConfig* c) { c->bf16_layers = {0}; }},
      // Layer 1 of two still writes FP8, so the FP8 pool is still needed.
      {"pool_bytes[fp8]", [](CacheConfig* c) {
         c->num_layers = 2;
         c->bf16_layers = {0};
         c->pool_bytes[int(KvFormat::kBf16)] = 4 * kBf16PageBytes;
         c->pool_bytes[int(KvFormat::kFp8)] = 0;
       }},
  };
  for (const Case& c : cases) {
    CacheConfig config = TinyConfig(4, 4, 4, 4);
    c.mutate(&config);
    std::unique_ptr<PagedCache> cache;
    const Status status = PagedCache::Create(config, &cache);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(status.message().find(c.field), std::string::npos) << c.field << ": " << status.message();
    EXPECT_EQ(cache, nullptr);
  }
}

TEST(PagedCache, AppendFillsPagesInOrder) {
  auto cache = MakeCache(TinyConfig(4, 2, 8, 4));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->AddSequence(&b).ok());
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  AppendRandom(cache.get(), a, 6, 1);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  EXPECT_EQ(cache->SeqTokens(a, 0), 6);
  AppendRandom(cache.get(), b, 1, 2);
  AppendRandom(cache.get(), a, 2, 3);  // fills page 1, opens page 3
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Fp8(2)}));
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  AppendRandom(cache.get(), a, 1, 4);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1), Fp8(3)}));
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(fp8->ref_count(p), 1) << p;
  EXPECT_TRUE(fp8->FreeListTopFirst().empty());

  ASSERT_TRUE(cache->Free(a).ok());
  EXPECT_FALSE(cache->HasSequence(a));
  // Pages released in logical order 0, 1, 3: LIFO puts 3 on top.
  EXPECT_EQ(fp8->FreeListTopFirst(), (std::vector<int32_t>{3, 1, 0}));
  EXPECT_EQ(cache->Sequences(), (std::vector<SeqId>{b}));
  EXPECT_EQ(cache->SeqTokens(a, 0), -1);
}

TEST(PagedCache, DecodeMatchesCodecRoundTrip) {
  auto cache = MakeCache(TinyConfig(4, 2, 8, 4));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const Tokens tokens = AppendRandom(cache.get(), a, 7, 11);
  std::vector<float> k(kHeadDim), v(kHeadDim);
  for (int t = 0; t < 7; ++t) {
    ASSERT_TRUE(cache->DecodeToken(a, 0, t, k.data(), v.data()).ok());
    EXPECT_EQ(k, Fp8RoundTrip(tokens.k.data() + t * kHeadDim, kHeadDim)) << "token " << t;
    EXPECT_EQ(v, Fp8RoundTrip(tokens.v.data() + t * kHeadDim, kHeadDim)) << "token " << t;
  }
  EXPECT_EQ(cache->DecodeToken(a, 0, 7, k.data(), v.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->DecodeToken(a, 0, -1, k.data(), v.data()).code(), StatusCode::kInvalidArgument);
}

TEST(PagedCache, RetentionConvertsStalePagesAndKeepsFp8WhenTq3PoolIsFull) {
  // anchors: first 4 tokens (page 0); recent: last 4 tokens.
  auto cache = MakeCache(TinyConfig(5, 2, 4, 4));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const Tokens first = AppendRandom(cache.get(), a, 16, 21);
  // Pages 1 and 2 left the recent window and are not anchors: converted into TQ3 pages 0 and 1; their FP8
  // pages 1 and 2 are freed in that order (LIFO: 2 on top).
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Tq3(0), Tq3(1), Fp8(3)}));
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  const PagePool* tq3 = cache->Pool(KvFormat::kTq3);
  EXPECT_EQ(fp8->FreeListTopFirst(), (std::vector<int32_t>{2, 1, 4}));
  EXPECT_EQ(tq3->FreeListTopFirst(), (std::vector<int32_t>{}));
  EXPECT_EQ(tq3->ref_count(0), 1);
  EXPECT_EQ(tq3->ref_count(1), 1);

  // Converted tokens decode to exactly TQ3(FP8(x)).
  std::vector<float> k(kHeadDim), v(kHeadDim);
  for (int t = 4; t < 12; ++t) {
    ASSERT_TRUE(cache->DecodeToken(a, 0, t, k.data(), v.data()).ok());
    EXPECT_EQ(k, Tq3OfFp8(cache->rotation(), first.k.data() + t * kHeadDim)) << "token " << t;
    EXPECT_EQ(v, Tq3OfFp8(cache->rotation(), first.v.data() + t * kHeadDim)) << "token " << t;
  }

  // Page 3 leaves the window next, but the TQ3 pool is full: it stays FP8, accounted as stale kept hot.
  AppendRandom(cache.get(), a, 4, 22);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Tq3(0), Tq3(1), Fp8(3), Fp8(2)}));
  KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.anchor_token_layers, 4);
  EXPECT_EQ(acc.stale_tq3_token_layers, 8);
  EXPECT_EQ(acc.stale_kept_hot_token_layers, 4);
  EXPECT_EQ(acc.recent_token_layers, 4);
  EXPECT_NE(acc.ToString().find("stale kept hot 4"), std::string::npos) << acc.ToString();

  // ApplyRetention retries the page and finds the TQ3 pool still full: not an error, nothing changes.
  EXPECT_TRUE(cache->ApplyRetention(a).ok());
  EXPECT_EQ(Pages(*cache, a)[3], Fp8(3));
}

// A hot layer keeps its stale pages FP8 (accounted as stale kept hot) while the other layer converts.
TEST(PagedCache, HotLayersNeverConvert) {
  CacheConfig config = TinyConfig(8, 4, 4, 0);
  config.num_layers = 2;
  config.policy.hot_layers = {1};
  auto cache = MakeCache(config);
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 12, 31, /*layer=*/0);
  AppendRandom(cache.get(), a, 12, 32, /*layer=*/1);
  EXPECT_EQ(Pages(*cache, a, 0), (std::vector<PageRef>{Tq3(0), Tq3(1), Fp8(2)}));
  EXPECT_EQ(Pages(*cache, a, 1), (std::vector<PageRef>{Fp8(1), Fp8(0), Fp8(3)}));  // LIFO: layer 0 freed 0 then 1
  EXPECT_TRUE(cache->ApplyRetention(a).ok());
  EXPECT_EQ(Pages(*cache, a, 1), (std::vector<PageRef>{Fp8(1), Fp8(0), Fp8(3)}));  // LIFO: layer 0 freed 0 then 1
  const KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.stale_tq3_token_layers, 8);
  EXPECT_EQ(acc.stale_kept_hot_token_layers, 8);
  EXPECT_EQ(acc.recent_token_layers, 8);
}

// A BF16 layer (CacheConfig::bf16_layers) writes BF16 pages that never convert, while the FP8 layer converts;
// its tokens decode to exactly their BF16 rounding and accounting counts its stale pages as kept hot.
TEST(PagedCache, Bf16LayersWriteBf16AndNeverConvert) {
  CacheConfig config = TinyConfig(8, 4, 4, 0);
  config.num_layers = 2;
  config.bf16_layers = {1, 1};  // may repeat
  config.pool_bytes[int(KvFormat::kBf16)] = 4 * kBf16PageBytes;
  auto cache = MakeCache(config);
  EXPECT_EQ(cache->LayerHotFormat(0), KvFormat::kFp8);
  EXPECT_EQ(cache->LayerHotFormat(1), KvFormat::kBf16);
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 12, 31, /*layer=*/0);
  const Tokens bf16_tokens = AppendRandom(cache.get(), a, 12, 32, /*layer=*/1);
  EXPECT_EQ(Pages(*cache, a, 0), (std::vector<PageRef>{Tq3(0), Tq3(1), Fp8(2)}));
  EXPECT_EQ(Pages(*cache, a, 1), (std::vector<PageRef>{Bf16(0), Bf16(1), Bf16(2)}));
  EXPECT_TRUE(cache->ApplyRetention(a).ok());
  EXPECT_EQ(Pages(*cache, a, 1), (std::vector<PageRef>{Bf16(0), Bf16(1), Bf16(2)}));
  std::vector<float> k(kHeadDim), v(kHeadDim);
  for (int t = 0; t < 12; ++t) {
    ASSERT_TRUE(cache->DecodeToken(a, 1, t, k.data(), v.data()).ok());
    for (int i = 0; i < kHeadDim; ++i) {
      const size_t at = size_t(t) * kHeadDim + size_t(i);
      ASSERT_EQ(k[size_t(i)], Bf16ToFloat(FloatToBf16(bf16_tokens.k[at]))) << "token " << t << " coordinate " << i;
      ASSERT_EQ(v[size_t(i)], Bf16ToFloat(FloatToBf16(bf16_tokens.v[at]))) << "token " << t << " coordinate " << i;
    }
  }
  const KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].live_pages, 3);
  EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].token_layers, 12);
  EXPECT_EQ(acc.stale_tq3_token_layers, 8);
  EXPECT_EQ(acc.stale_kept_hot_token_layers, 8);  // the BF16 layer's two stale pages
  EXPECT_EQ(acc.recent_token_layers, 8);

  // The BF16 pool full: a clear error naming it, the cache unchanged.
  SeqId b = -1;
  ASSERT_TRUE(cache->AddSequence(&b).ok());
  const std::vector<float> more = RandomTokens(8, 1, kHeadDim, 33);
  const Status full = cache->Append(b, 1, more.data(), more.data(), 8);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("bf16 pool full"), std::string::npos) << full.message();
  EXPECT_EQ(cache->SeqTokens(b, 1), 0);
}

// Every layer BF16: no pool of the hot format is needed.
TEST(PagedCache, AllLayersBf16NeedNoFp8Pool) {
  CacheConfig config = TinyConfig(0, 0, 4, 0);
  config.bf16_layers = {0};
  config.pool_bytes[int(KvFormat::kBf16)] = 2 * kBf16PageBytes;
  auto cache = MakeCache(config);
  ASSERT_NE(cache, nullptr);
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 6, 41);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Bf16(0), Bf16(1)}));
}

TEST(PagedCache, ApplyRetentionRetriesPagesKeptFp8OnceTq3SpaceFrees) {
  auto cache = MakeCache(TinyConfig(8, 1, 4, 0));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->AddSequence(&b).ok());
  AppendRandom(cache.get(), a, 8, 31);  // a's page 0 converts into the only TQ3 page
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Tq3(0), Fp8(1)}));
  // a's FP8 page 0 went back on top of the free list, so b reuses it.
  AppendRandom(cache.get(), b, 8, 32);  // b's page 0 must stay FP8: the TQ3 pool is full
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Fp8(0), Fp8(2)}));
  EXPECT_EQ(cache->Accounting().stale_kept_hot_token_layers, 4);
  ASSERT_TRUE(cache->Free(a).ok());
  EXPECT_EQ(cache->Pool(KvFormat::kFp8)->FreeListTopFirst(), (std::vector<int32_t>{1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(cache->Pool(KvFormat::kTq3)->FreeListTopFirst(), (std::vector<int32_t>{0}));
  ASSERT_TRUE(cache->ApplyRetention(b).ok());
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Tq3(0), Fp8(2)}));
  EXPECT_EQ(cache->Pool(KvFormat::kFp8)->FreeListTopFirst(), (std::vector<int32_t>{0, 1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(cache->Accounting().stale_kept_hot_token_layers, 0);
}

TEST(PagedCache, ConversionBytesAreFp8DecodeThenTq3Encode) {
  auto cache = MakeCache(TinyConfig(4, 2, 4, 0));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 4, 41);
  ASSERT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0)}));
  const PageLayout fp8_layout = cache->Layout(KvFormat::kFp8);
  const PageLayout tq3_layout = cache->Layout(KvFormat::kTq3);
  const std::vector<uint8_t> fp8_page(cache->PoolBase(KvFormat::kFp8),
                                      cache->PoolBase(KvFormat::kFp8) + fp8_layout.page_bytes());
  AppendRandom(cache.get(), a, 4, 42);  // page 0 leaves the 4-token recent window
  ASSERT_EQ(Pages(*cache, a), (std::vector<PageRef>{Tq3(0), Fp8(1)}));
  const uint8_t* tq3_page = cache->PoolBase(KvFormat::kTq3);
  for (int slot = 0; slot < kPageTokens; ++slot) {
    for (int part = 0; part < 2; ++part) {
      float scale = 0.0f;
      std::memcpy(&scale, fp8_page.data() + (part ? fp8_layout.v_scale_offset(0, slot) : fp8_layout.k_scale_offset(0, slot)),
                  sizeof(float));
      std::vector<float> decoded(kHeadDim);
      Fp8DecodeVector(fp8_page.data() + (part ? fp8_layout.v_codes_offset(0, slot) : fp8_layout.k_codes_offset(0, slot)),
                      scale, kHeadDim, decoded.data());
      std::vector<uint8_t> codes(size_t(Tq3CodeBytes(kHeadDim)));
      uint16_t scale_fp16 = 0;
      ASSERT_TRUE(Tq3EncodeVector(cache->rotation(), decoded.data(), codes.data(), &scale_fp16).ok());
      const size_t codes_at = part ? tq3_layout.v_codes_offset(0, slot) : tq3_layout.k_codes_offset(0, slot);
      const size_t scale_at = part ? tq3_layout.v_scale_offset(0, slot) : tq3_layout.k_scale_offset(0, slot);
      EXPECT_EQ(std::memcmp(tq3_page + codes_at, codes.data(), codes.size()), 0) << "slot " << slot;
      EXPECT_EQ(std::memcmp(tq3_page + scale_at, &scale_fp16, sizeof(uint16_t)), 0) << "slot " << slot;
    }
  }
  // Alignment padding of the TQ3 page stays zero.
  for (size_t i = tq3_layout.payload_bytes(); i < tq3_layout.page_bytes(); ++i) EXPECT_EQ(tq3_page[i], 0) << i;
}

TEST(PagedCache, FullFp8PoolOnAppendLeavesCacheByteForByteUnchanged) {
  auto cache = MakeCache(TinyConfig(3, 2, 100, 0));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->AddSequence(&b).ok());
  AppendRandom(cache.get(), a, 6, 51);
  AppendRandom(cache.get(), b, 3, 52);
  const cache_test::CacheSnapshot before = Snapshot(*cache);
  // b has one free slot in its page; 2 tokens need one more page and the pool has none.
  const std::vector<float> k = RandomTokens(2, 1, kHeadDim, 53);
  const Status status = cache->Append(b, 0, k.data(), k.data(), 2);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("fp8 pool full"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("needs 1 pages, 0 of 3 are free"), std::string::npos) << status.message();
  EXPECT_EQ(cache->SeqTokens(b, 0), 3);
  EXPECT_TRUE(Snapshot(*cache) == before);
  // One token still fits in b's last page.
  EXPECT_TRUE(cache->Append(b, 0, k.data(), k.data(), 1).ok());
  EXPECT_EQ(cache->SeqTokens(b, 0), 4);
}

TEST(PagedCache, NonFiniteInputIsRejectedNamingTheValueAndChangesNothing) {
  auto cache = MakeCache(TinyConfig(4, 2, 4, 0));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 3, 61);
  const cache_test::CacheSnapshot before = Snapshot(*cache);
  std::vector<float> k = RandomTokens(5, 1, kHeadDim, 62);
  std::vector<float> v = RandomTokens(5, 1, kHeadDim, 63);
  k[size_t(2) * kHeadDim + 5] = std::numeric_limits<float>::quiet_NaN();
  Status status = cache->Append(a, 0, k.data(), v.data(), 5);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("k[token 2][head 0][coordinate 5] is NaN"), std::string::npos) << status.message();
  EXPECT_TRUE(Snapshot(*cache) == before);

  k[size_t(2) * kHeadDim + 5] = 0.5f;
  v[size_t(4) * kHeadDim + 63] = -std::numeric_limits<float>::infinity();
  status = cache->Append(a, 0, k.data(), v.data(), 5);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("v[token 4][head 0][coordinate 63] is Inf"), std::string::npos) << status.message();
  EXPECT_TRUE(Snapshot(*cache) == before);
}

TEST(PagedCache, BadLayerUnknownSequenceAndBadArgumentsAreClearErrors) {
  auto cache = MakeCache(TinyConfig(4, 2, 4, 0));
  SeqId a = -1, child = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const std::vector<float> k = RandomTokens(1, 1, kHeadDim, 71);
  Status status = cache->Append(a, 1, k.data(), k.data(), 1);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("layer 1 out of range [0, 1)"), std::string::npos) << status.message();
  status = cache->Append(a, -1, k.data(), k.data(), 1);
  EXPECT_NE(status.message().find("layer -1"), std::string::npos) << status.message();
  status = cache->Append(42, 0, k.data(), k.data(), 1);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("unknown sequence id 42"), std::string::npos) << status.message();
  status = cache->Append(a, 0, nullptr, k.data(), 1);
  EXPECT_NE(status.message().find("k is null"), std::string::npos) << status.message();
  status = cache->Append(a, 0, k.data(), k.data(), -3);
  EXPECT_NE(status.message().find("num_tokens = -3"), std::string::npos) << status.message();
  EXPECT_TRUE(cache->Append(a, 0, nullptr, nullptr, 0).ok());  // no-op
  EXPECT_EQ(cache->Fork(42, &child).code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->Free(42).code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->ApplyRetention(42).code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->Pin(42, 0, 1).code(), StatusCode::kNotFound);
  status = cache->Pin(a, 5, 5);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("pin range [5, 5)"), std::string::npos) << status.message();
  EXPECT_EQ(cache->Pin(a, -1, 3).code(), StatusCode::kInvalidArgument);
  FormatViewStorage storage;
  PagedKvView view;
  const SeqId unknown[] = {a, 42};
  EXPECT_EQ(cache->BuildFormatView(0, unknown, KvFormat::kFp8, &storage, &view).code(), StatusCode::kNotFound);
  EXPECT_EQ(cache->BuildFormatView(3, {}, KvFormat::kFp8, &storage, &view).code(), StatusCode::kInvalidArgument);
  // Null outputs are errors, not crashes (were: segmentation faults).
  const SeqId just_a[] = {a};
  EXPECT_NE(cache->BuildFormatView(0, just_a, KvFormat::kFp8, nullptr, &view).message().find("storage is null"),
            std::string::npos);
  EXPECT_NE(cache->BuildFormatView(0, just_a, KvFormat::kFp8, &storage, nullptr).message().find("view is null"),
            std::string::npos);
  ASSERT_TRUE(cache->Append(a, 0, k.data(), k.data(), 1).ok());
  std::vector<float> decoded(k.size());
  EXPECT_NE(cache->DecodeToken(a, 0, 0, nullptr, decoded.data()).message().find("k is null"), std::string::npos);
  EXPECT_NE(cache->DecodeToken(a, 0, 0, decoded.data(), nullptr).message().find("v is null"), std::string::npos);
  ASSERT_TRUE(cache->Free(a).ok());
  EXPECT_EQ(cache->Free(a).code(), StatusCode::kNotFound);  // double free
  EXPECT_EQ(cache->Accounting().formats[int(KvFormat::kFp8)].live_pages, 0);
}

TEST(PagedCache, ForkSharesPagesAndCopiesAPartlyFilledLastPageOnWrite) {
  auto cache = MakeCache(TinyConfig(6, 2, 100, 0));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const Tokens prefix = AppendRandom(cache.get(), a, 6, 81);
  ASSERT_TRUE(cache->Fork(a, &b).ok());
  EXPECT_EQ(b, 1);
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  EXPECT_EQ(fp8->ref_count(0), 2);
  EXPECT_EQ(fp8->ref_count(1), 2);
  EXPECT_EQ(fp8->live_pages(), 2);
  KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.stored_token_layers, 6);   // shared pages count once
  EXPECT_EQ(acc.logical_token_layers, 12);
  EXPECT_EQ(acc.formats[int(KvFormat::kFp8)].live_pages, 2);

  // b appends into the shared partly-filled page 1: b gets a private copy (page 2), a keeps page 1.
  const Tokens b_tail = AppendRandom(cache.get(), b, 1, 82);
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Fp8(0), Fp8(2)}));
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  EXPECT_EQ(fp8->ref_count(1), 1);
  EXPECT_EQ(fp8->ref_count(2), 1);
  EXPECT_EQ(cache->SeqTokens(a, 0), 6);
  EXPECT_EQ(cache->SeqTokens(b, 0), 7);
  // a appends in place (its page 1 is no longer shared).
  const Tokens a_tail = AppendRandom(cache.get(), a, 2, 83);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));

  std::vector<float> k(kHeadDim), v(kHeadDim);
  for (int t = 0; t < 6; ++t) {
    const std::vector<float> expected = Fp8RoundTrip(prefix.k.data() + t * kHeadDim, kHeadDim);
    ASSERT_TRUE(cache->DecodeToken(a, 0, t, k.data(), v.data()).ok());
    EXPECT_EQ(k, expected) << t;
    ASSERT_TRUE(cache->DecodeToken(b, 0, t, k.data(), v.data()).ok());
    EXPECT_EQ(k, expected) << t;
  }
  ASSERT_TRUE(cache->DecodeToken(b, 0, 6, k.data(), v.data()).ok());
  EXPECT_EQ(k, Fp8RoundTrip(b_tail.k.data(), kHeadDim));
  ASSERT_TRUE(cache->DecodeToken(a, 0, 6, k.data(), v.data()).ok());
  EXPECT_EQ(k, Fp8RoundTrip(a_tail.k.data(), kHeadDim));

  ASSERT_TRUE(cache->Free(a).ok());
  EXPECT_EQ(fp8->ref_count(0), 1);
  EXPECT_EQ(fp8->FreeListTopFirst(), (std::vector<int32_t>{1, 3, 4, 5}));
  ASSERT_TRUE(cache->Free(b).ok());
  EXPECT_EQ(fp8->FreeListTopFirst(), (std::vector<int32_t>{2, 0, 1, 3, 4, 5}));
}

// A page at the largest reference count: Fork is an error naming the parent and the page, and changes nothing
// (no child, no reference taken on the parent's other pages).
TEST(PagedCache, ForkOfAPageAtTheLargestRefCountIsAnErrorAndChangesNothing) {
  auto cache = MakeCache(TinyConfig(6, 2, 100, 0));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 6, 84);
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  ASSERT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  PagePoolTestPeer::SetRefCount(fp8, 1, PagePool::kMaxPageRefs);
  const Status fork = cache->Fork(a, &b);
  EXPECT_EQ(fork.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(fork.message().find("Fork of sequence 0: its fp8 page 1 already holds 2147483647 references"),
            std::string::npos)
      << fork.message();
  EXPECT_EQ(b, -1);
  EXPECT_EQ(fp8->ref_count(0), 1);
  EXPECT_EQ(cache->SeqTokens(a, 0), 6);
  PagePoolTestPeer::SetRefCount(fp8, 1, 1);
  ASSERT_TRUE(cache->Fork(a, &b).ok());
  EXPECT_EQ(b, 1);  // the failed fork took no id
  EXPECT_EQ(fp8->ref_count(0), 2);
}

// The second owner of a converted page shares its TQ3 page; if that page is at the largest reference count, the
// owner's page stays FP8 (as with a full TQ3 pool) and nothing else changes.
TEST(PagedCache, SharingAConvertedPageAtTheLargestRefCountKeepsTheOwnersFp8Page) {
  auto cache = MakeCache(TinyConfig(6, 3, 4, 0));
  SeqId a = -1, b = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 4, 97);
  ASSERT_TRUE(cache->Fork(a, &b).ok());
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  const PagePool* tq3 = cache->Pool(KvFormat::kTq3);
  AppendRandom(cache.get(), b, 4, 98);  // b converts fp8 page 0 -> tq3 page 0
  ASSERT_EQ(Pages(*cache, b), (std::vector<PageRef>{Tq3(0), Fp8(1)}));
  PagePoolTestPeer::SetRefCount(tq3, 0, PagePool::kMaxPageRefs);
  AppendRandom(cache.get(), a, 4, 99);  // a would share tq3 page 0
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(2)}));
  EXPECT_EQ(fp8->ref_count(0), 1);
  EXPECT_EQ(tq3->ref_count(0), PagePool::kMaxPageRefs);
  EXPECT_EQ(tq3->live_pages(), 1);
  PagePoolTestPeer::SetRefCount(tq3, 0, 1);
}

// PagedCache converts exactly what PagesToConvert (retention_policy.h, the function GPU engines call) lists for
// each append, pins included.
TEST(PagedCache, ConvertsWhatPagesToConvertLists) {
  CacheConfig config = TinyConfig(40, 40, 9, 5);
  auto cache = MakeCache(config);
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->Pin(a, 30, 33).ok());
  const std::vector<TokenRange> pins = {{30, 33}};
  std::mt19937 rng(5);
  int64_t tokens = 0;
  int converted_total = 0;
  while (tokens < 120) {
    const int n = 1 + int(rng() % 11);
    const std::vector<PageRef> before = Pages(*cache, a);
    AppendRandom(cache.get(), a, n, 300 + uint64_t(tokens));
    std::vector<int64_t> listed;
    ASSERT_TRUE(PagesToConvert(config.policy, kPageTokens, tokens, tokens + n, pins, &listed).ok());
    tokens += n;
    const std::vector<PageRef> after = Pages(*cache, a);
    for (size_t i = 0; i < after.size(); ++i) {
      const bool is_listed = std::find(listed.begin(), listed.end(), int64_t(i)) != listed.end();
      const KvFormat was = i < before.size() ? before[i].format : KvFormat::kFp8;
      EXPECT_EQ(after[i].format, is_listed ? KvFormat::kTq3 : was) << "page " << i << " at " << tokens << " tokens";
    }
    converted_total += int(listed.size());
  }
  // 120 tokens, 30 pages: pages 0-1 hold anchors, 7-8 the pin, the last 9 tokens' pages are recent.
  EXPECT_EQ(converted_total, int(StalePageEnd(config.policy, kPageTokens, tokens)) - 4);
}

TEST(PagedCache, SharedPageIsConvertedOnceAndTheMappingDiesWithThePage) {
  // No anchors, recent window 4 tokens: a full page converts as soon as 4 more tokens follow it.
  auto cache = MakeCache(TinyConfig(6, 3, 4, 0));
  SeqId a = -1, b = -1, c = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const Tokens prefix = AppendRandom(cache.get(), a, 4, 91);
  ASSERT_TRUE(cache->Fork(a, &b).ok());
  const PagePool* fp8 = cache->Pool(KvFormat::kFp8);
  const PagePool* tq3 = cache->Pool(KvFormat::kTq3);

  AppendRandom(cache.get(), b, 4, 92);  // b sees page 0 stale: converts it for b only
  EXPECT_EQ(Pages(*cache, b), (std::vector<PageRef>{Tq3(0), Fp8(1)}));
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0)}));  // still recent for a
  EXPECT_EQ(fp8->ref_count(0), 1);
  EXPECT_EQ(tq3->ref_count(0), 1);

  AppendRandom(cache.get(), a, 4, 93);  // a converts the same physical page: reuses TQ3 page 0
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Tq3(0), Fp8(2)}));
  EXPECT_EQ(tq3->ref_count(0), 2);
  EXPECT_EQ(tq3->live_pages(), 1);
  EXPECT_EQ(fp8->ref_count(0), 0);
  EXPECT_EQ(fp8->FreeListTopFirst(), (std::vector<int32_t>{0, 3, 4, 5}));
  std::vector<float> ka(kHeadDim), va(kHeadDim), kb(kHeadDim), vb(kHeadDim);
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(cache->DecodeToken(a, 0, t, ka.data(), va.data()).ok());
    ASSERT_TRUE(cache->DecodeToken(b, 0, t, kb.data(), vb.data()).ok());
    EXPECT_EQ(ka, kb);
    EXPECT_EQ(ka, Tq3OfFp8(cache->rotation(), prefix.k.data() + t * kHeadDim));
  }
  KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.stale_tq3_token_layers, 4);  // shared TQ3 page counted once
  EXPECT_EQ(acc.formats[int(KvFormat::kTq3)].live_pages, 1);

  // A second fork whose source FP8 page dies before the other owner converts: the pairing must not survive
  // into the reused page id.
  SeqId d = -1;
  ASSERT_TRUE(cache->AddSequence(&c).ok());
  AppendRandom(cache.get(), c, 4, 94);  // fp8 page 0 again
  EXPECT_EQ(Pages(*cache, c), (std::vector<PageRef>{Fp8(0)}));
  ASSERT_TRUE(cache->Fork(c, &d).ok());
  AppendRandom(cache.get(), d, 4, 95);  // d converts fp8 page 0 -> tq3 page 1 (pairing 0 <-> 1)
  EXPECT_EQ(Pages(*cache, d), (std::vector<PageRef>{Tq3(1), Fp8(3)}));
  ASSERT_TRUE(cache->Free(c).ok());     // fp8 page 0 freed: pairing forgotten
  SeqId e = -1;
  ASSERT_TRUE(cache->AddSequence(&e).ok());
  const Tokens fresh = AppendRandom(cache.get(), e, 8, 96);  // reuses fp8 page 0, converts it anew
  EXPECT_EQ(Pages(*cache, e), (std::vector<PageRef>{Tq3(2), Fp8(4)}));
  EXPECT_EQ(tq3->ref_count(1), 1);
  ASSERT_TRUE(cache->DecodeToken(e, 0, 0, ka.data(), va.data()).ok());
  EXPECT_EQ(ka, Tq3OfFp8(cache->rotation(), fresh.k.data()));
}

TEST(PagedCache, PinKeepsPagesFp8AndCannotRestoreConvertedPages) {
  auto cache = MakeCache(TinyConfig(6, 4, 4, 0));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->Pin(a, 5, 6).ok());  // before the tokens exist: protects page 1
  AppendRandom(cache.get(), a, 16, 101);
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Tq3(0), Fp8(1), Tq3(1), Fp8(3)}));
  KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.anchor_token_layers, 4);
  EXPECT_EQ(acc.stale_tq3_token_layers, 8);
  EXPECT_EQ(acc.recent_token_layers, 4);

  // Pinning an already converted page is accepted but cannot bring FP8 back (TQ3 is lossy).
  ASSERT_TRUE(cache->Pin(a, 0, 1).ok());
  ASSERT_TRUE(cache->ApplyRetention(a).ok());
  EXPECT_EQ(Pages(*cache, a)[0], Tq3(0));
  EXPECT_EQ(cache->Accounting().stale_tq3_token_layers, 8);
  ASSERT_EQ(cache->Pins(a).size(), 2u);
  EXPECT_EQ(cache->Pins(a)[0].begin_token, 5);

  SeqId child = -1;
  ASSERT_TRUE(cache->Fork(a, &child).ok());
  EXPECT_EQ(cache->Pins(child).size(), 2u);  // inherited
}

TEST(PagedCache, HugeVectorsThatOverflowTheTq3ScaleStayFp8) {
  auto cache = MakeCache(TinyConfig(4, 2, 4, 0));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  // |x| = 1e6 * sqrt(64) -> TQ3 scale ~ 1e6 > 65504 (fp16 max): TQ3 refuses, FP8 is fine.
  std::vector<float> big(size_t(8) * kHeadDim, 1.0e6f);
  ASSERT_TRUE(cache->Append(a, 0, big.data(), big.data(), 8).ok());
  EXPECT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Fp8(1)}));
  EXPECT_EQ(cache->Pool(KvFormat::kTq3)->live_pages(), 0);
  EXPECT_EQ(cache->Pool(KvFormat::kTq3)->FreeListTopFirst(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(cache->Accounting().stale_kept_hot_token_layers, 4);
}

TEST(PagedCache, AccountingExactBytes) {
  auto cache = MakeCache(TinyConfig(4, 2, 100, 0));
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  AppendRandom(cache.get(), a, 6, 111);
  const KvAccounting acc = cache->Accounting();
  const FormatAccounting& fp8 = acc.formats[int(KvFormat::kFp8)];
  EXPECT_EQ(fp8.capacity_pages, 4);
  EXPECT_EQ(fp8.live_pages, 2);
  EXPECT_EQ(fp8.page_bytes, kFp8PageBytes);
  EXPECT_EQ(fp8.live_bytes, 2 * kFp8PageBytes);
  EXPECT_EQ(fp8.token_layers, 6);
  EXPECT_EQ(fp8.code_bytes, 6u * 2 * 64);               // 768
  EXPECT_EQ(fp8.scale_bytes, 6u * 2 * 4);               // 48
  EXPECT_EQ(fp8.slack_bytes, 2 * kFp8PageBytes - 816);  // 336: 2 empty slots + 2 x 32 B padding
  EXPECT_EQ(acc.metadata_bytes, 2 * sizeof(PageRef));
  EXPECT_EQ(acc.total_bytes, 2 * kFp8PageBytes + 2 * sizeof(PageRef));
  EXPECT_EQ(acc.recent_token_layers, 6);
  EXPECT_EQ(acc.stored_token_layers, 6);
  EXPECT_DOUBLE_EQ(acc.bytes_per_live_token, double(acc.total_bytes) / 6.0);
  EXPECT_DOUBLE_EQ(acc.compression_vs_bf16, 6.0 * 2 * 64 * 2 / double(acc.total_bytes));
  EXPECT_DOUBLE_EQ(acc.compression_vs_fp8, 6.0 * 2 * 64 / double(acc.total_bytes));
  EXPECT_EQ(acc.formats[int(KvFormat::kTq3)].capacity_pages, 2);
  EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].capacity_pages, 0);
  EXPECT_NE(acc.ToString().find("fp8  pages 2 / 4"), std::string::npos) << acc.ToString();

  const KvAccounting empty = MakeCache(TinyConfig(4, 2, 100, 0))->Accounting();
  EXPECT_EQ(empty.total_bytes, 0u);
  EXPECT_EQ(empty.bytes_per_live_token, 0.0);
  EXPECT_EQ(empty.compression_vs_bf16, 0.0);
}

TEST(PagedCache, Bf16ControlCacheIsExactAndNeverConverted) {
  CacheConfig config = TinyConfig(0, 4, 4, 0);
  config.hot_format = KvFormat::kBf16;
  config.pool_bytes[int(KvFormat::kBf16)] = 4 * kBf16PageBytes;
  auto cache = MakeCache(config);
  SeqId a = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  const Tokens tokens = AppendRandom(cache.get(), a, 13, 121);
  const PageRef bf16_0{KvFormat::kBf16, 0};
  ASSERT_EQ(Pages(*cache, a).size(), 4u);
  EXPECT_EQ(Pages(*cache, a)[0], bf16_0);
  for (const PageRef& page : Pages(*cache, a)) EXPECT_EQ(page.format, KvFormat::kBf16);
  std::vector<float> k(kHeadDim), v(kHeadDim);
  for (int t = 0; t < 13; ++t) {
    ASSERT_TRUE(cache->DecodeToken(a, 0, t, k.data(), v.data()).ok());
    for (int i = 0; i < kHeadDim; ++i) {
      ASSERT_EQ(k[i], Bf16ToFloat(FloatToBf16(tokens.k[size_t(t) * kHeadDim + i])));
      ASSERT_EQ(v[i], Bf16ToFloat(FloatToBf16(tokens.v[size_t(t) * kHeadDim + i])));
    }
  }
  const KvAccounting acc = cache->Accounting();
  EXPECT_EQ(acc.stale_kept_hot_token_layers, 8);  // pages 0, 1 are stale, kept BF16
  EXPECT_EQ(acc.recent_token_layers, 5);
  EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].scale_bytes, 0u);
  EXPECT_EQ(acc.formats[int(KvFormat::kBf16)].slack_bytes, 3u * 2 * 128);  // 3 empty slots of the last page
}

TEST(PagedCache, BuildFormatViewListsEachFormatsPagesWithTheLastPageLengths) {
  CacheConfig config = TinyConfig(8, 8, 4, 4);
  config.num_layers = 2;
  auto cache = MakeCache(config);
  SeqId a = -1, b = -1, c = -1;
  ASSERT_TRUE(cache->AddSequence(&a).ok());
  ASSERT_TRUE(cache->AddSequence(&b).ok());
  ASSERT_TRUE(cache->AddSequence(&c).ok());
  AppendRandom(cache.get(), a, 18, 131);  // fp8 0 (anchor), tq3 0, tq3 1, fp8 3, fp8 4 (2 tokens)
  AppendRandom(cache.get(), b, 3, 132);   // fp8 2 (3 tokens): freed by a's conversion, on top of the list
  AppendRandom(cache.get(), a, 5, 133, /*layer=*/1);  // fp8 1, fp8 5 (1 token)
  ASSERT_EQ(Pages(*cache, a), (std::vector<PageRef>{Fp8(0), Tq3(0), Tq3(1), Fp8(3), Fp8(4)}));
  ASSERT_EQ(Pages(*cache, b), (std::vector<PageRef>{Fp8(2)}));
  ASSERT_EQ(Pages(*cache, a, 1), (std::vector<PageRef>{Fp8(1), Fp8(5)}));
  const SeqId batch[] = {b, a, c, a};
  FormatViewStorage storage;
  PagedKvView view;
  ASSERT_TRUE(cache->BuildFormatView(0, batch, KvFormat::kFp8, &storage, &view).ok());
  EXPECT_EQ(view.num_seqs, 4);
  EXPECT_EQ(view.pages, cache->PoolBase(KvFormat::kFp8));
  EXPECT_EQ(view.layout.page_bytes(), kFp8PageBytes);
  EXPECT_EQ(storage.page_indptr, (std::vector<int32_t>{0, 1, 4, 4, 7}));
  EXPECT_EQ(storage.page_ids, (std::vector<int32_t>{2, 0, 3, 4, 0, 3, 4}));
  EXPECT_EQ(storage.last_page_tokens, (std::vector<int32_t>{3, 2, 0, 2}));
  EXPECT_EQ(ViewSeqTokens(view, 0), 3);
  EXPECT_EQ(ViewSeqTokens(view, 1), 10);  // anchor page 4 + recent pages 4 + 2
  EXPECT_EQ(ViewSeqTokens(view, 2), 0);

  ASSERT_TRUE(cache->BuildFormatView(0, batch, KvFormat::kTq3, &storage, &view).ok());
  EXPECT_EQ(view.pages, cache->PoolBase(KvFormat::kTq3));
  EXPECT_EQ(storage.page_indptr, (std::vector<int32_t>{0, 0, 2, 2, 4}));
  EXPECT_EQ(storage.page_ids, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(storage.last_page_tokens, (std::vector<int32_t>{0, 4, 0, 4}));
  EXPECT_EQ(ViewSeqTokens(view, 1), 8);

  ASSERT_TRUE(cache->BuildFormatView(1, batch, KvFormat::kFp8, &storage, &view).ok());
  EXPECT_EQ(storage.page_indptr, (std::vector<int32_t>{0, 0, 2, 2, 4}));
  EXPECT_EQ(storage.page_ids, (std::vector<int32_t>{1, 5, 1, 5}));
  EXPECT_EQ(storage.last_page_tokens, (std::vector<int32_t>{0, 1, 0, 1}));

  ASSERT_TRUE(cache->BuildFormatView(0, batch, KvFormat::kBf16, &storage, &view).ok());
  EXPECT_EQ(view.pages, nullptr);  // no BF16 pool
  EXPECT_EQ(storage.page_indptr, (std::vector<int32_t>{0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace minimakv
