// The CPU half of the real-KV kernel check (tools/real_kv_check.h): the pages it builds are PagedCache's pages
// byte for byte (minima mix), every mix lists each token once at shuffled ids with poisoned spares, and the
// comparison passes the CPU's own output and fails a perturbed or NaN one.
#include "tools/real_kv_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>

#include "minimakv/kv_capture_model.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/paged_cache.h"
#include "minimakv/passkey_task.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {
namespace {

// A capture shaped like SmolLM2 (9 query / 3 KV heads, d 64) with keys carrying a few large channels, as real
// keys do, over 700 tokens and 3 queries; the policy is scaled down so every mix has pages of both kinds.
KvCapture SyntheticCapture() {
  KvCapture c;
  c.kv_dtype = KvCaptureDtype::kBf16;
  c.num_q_heads = 9;
  c.kv_heads = 3;
  c.head_dim = 64;
  c.page_tokens = 64;
  c.sm_scale = 0.125f;
  c.anchor_tokens = 100;
  c.recent_tokens = 200;
  c.tokens = 700;
  c.rotation_seed = HadamardRotation::kDefaultSeed;
  c.num_queries = 3;
  c.model_layers = 30;
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss;
  for (int layer : {2, 17}) {
    KvCaptureLayer l;
    l.layer = layer;
    l.k.resize(size_t(c.tokens) * c.kv_heads * c.head_dim);
    l.v.resize(l.k.size());
    l.q.resize(size_t(c.num_queries) * c.num_q_heads * c.head_dim);
    for (size_t i = 0; i < l.k.size(); ++i) {
      const float outlier = (i % 64 == 3 || i % 64 == 40) ? 8.0f : 1.0f;
      l.k[i] = Bf16ToFloat(FloatToBf16(gauss(rng) * outlier));
      l.v[i] = Bf16ToFloat(FloatToBf16(gauss(rng)));
    }
    for (float& x : l.q) x = gauss(rng) * 0.5f;
    c.layers.push_back(std::move(l));
  }
  return c;
}

TEST(RealKvCheckTest, MixRulesFollowTheRetentionPolicy) {
  const KvCapture c = SyntheticCapture();  // pages of 64, anchors 100, recent 200
  const int64_t n = 698;                   // pages 0..10, page 10 partial (tokens 640..697)
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 0), KvFormat::kFp8);  // anchor
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 1), KvFormat::kFp8);  // holds token 99 < 100
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 2), KvFormat::kTq3);
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 6), KvFormat::kTq3);  // tokens 384..447, all < 498
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 7), KvFormat::kFp8);  // holds 498..511: recent
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kMinima, n, 10), KvFormat::kFp8);
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kAllTq3, n, 10), KvFormat::kTq3);
  EXPECT_EQ(RealKvPageFormat(c, RealKvMix::kAllFp8, n, 3), KvFormat::kFp8);
}

// The minima mix's pages equal, byte for byte and in listed order, what PagedCache builds from the same K/V
// with the same policy (its FP8 encode and FP8 -> TQ3 conversion).
TEST(RealKvCheckTest, MinimaPagesEqualPagedCachePages) {
  const KvCapture c = SyntheticCapture();
  RealKvPages pages;
  const Status s = BuildRealKvPages(c, 1, RealKvMix::kMinima, 5, &pages);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int seq = 0; seq < c.num_queries; ++seq) {
    CacheConfig config;
    config.num_layers = 1;
    config.kv_heads = c.kv_heads;
    config.head_dim = c.head_dim;
    config.page_tokens = c.page_tokens;
    config.pool_bytes[int(KvFormat::kFp8)] = config.pool_bytes[int(KvFormat::kTq3)] = 8 << 20;
    config.policy.anchor_tokens = c.anchor_tokens;
    config.policy.recent_tokens = c.recent_tokens;
    config.rotation_seed = c.rotation_seed;
    std::unique_ptr<PagedCache> cache;
    ASSERT_TRUE(PagedCache::Create(config, &cache).ok());
    SeqId id;
    ASSERT_TRUE(cache->AddSequence(&id).ok());
    const int n = int(c.QueryContextTokens(seq));
    ASSERT_TRUE(cache->Append(id, 0, c.layers[1].k.data(), c.layers[1].v.data(), n).ok());
    for (int f = 0; f < 2; ++f) {
      const KvFormat format = f == 0 ? KvFormat::kFp8 : KvFormat::kTq3;
      FormatViewStorage storage;
      PagedKvView view;
      ASSERT_TRUE(cache->BuildFormatView(0, {&id, 1}, format, &storage, &view).ok());
      const RealKvPool& pool = pages.pools[f];
      const int32_t begin = pool.page_indptr[size_t(seq)], end = pool.page_indptr[size_t(seq) + 1];
      ASSERT_EQ(end - begin, view.page_indptr[1]) << "seq " << seq << " format " << f;
      if (end > begin) EXPECT_EQ(pool.last_page_tokens[size_t(seq)], view.last_page_tokens[0]);
      const size_t page_bytes = pool.layout.page_bytes();
      ASSERT_EQ(page_bytes, cache->Layout(format).page_bytes());
      for (int32_t i = 0; i < end - begin; ++i) {
        const uint8_t* ours = pool.base() + size_t(pool.page_ids[size_t(begin + i)]) * page_bytes;
        const uint8_t* theirs = view.pages + size_t(view.page_ids[i]) * page_bytes;
        ASSERT_EQ(std::memcmp(ours, theirs, page_bytes), 0) << "seq " << seq << " format " << f << " page " << i;
      }
    }
  }
}

TEST(RealKvCheckTest, EveryMixListsEveryTokenOnceAtShuffledIdsWithPoisonedSpares) {
  const KvCapture c = SyntheticCapture();
  for (RealKvMix mix : kAllRealKvMixes) {
    RealKvPages pages;
    ASSERT_TRUE(BuildRealKvPages(c, 0, mix, 9, &pages).ok());
    EXPECT_EQ(pages.num_seqs, c.num_queries);
    for (int seq = 0; seq < c.num_queries; ++seq) {
      int64_t tokens = 0;
      for (int f = 0; f < 2; ++f) tokens += ViewSeqTokens(pages.View(f), seq);
      EXPECT_EQ(tokens, c.QueryContextTokens(seq)) << RealKvMixName(mix) << " seq " << seq;
    }
    for (int f = 0; f < 2; ++f) {
      const RealKvPool& pool = pages.pools[f];
      EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.base()) % kPageAlignBytes, 0u);
      std::set<int32_t> ids(pool.page_ids.begin(), pool.page_ids.end());
      EXPECT_EQ(ids.size(), pool.page_ids.size()) << "a physical page listed twice";
      EXPECT_GT(pool.capacity_pages, pool.used_pages());
      for (int32_t id : ids) EXPECT_LT(id, pool.capacity_pages);
      if (pool.used_pages() > 4) {
        EXPECT_FALSE(std::is_sorted(pool.page_ids.begin(), pool.page_ids.end())) << "ids not shuffled";
      }
      const size_t page_bytes = pool.layout.page_bytes();
      for (int32_t p = 0; p < pool.capacity_pages; ++p) {
        if (ids.count(p)) continue;
        const uint8_t* page = pool.base() + size_t(p) * page_bytes;
        EXPECT_TRUE(std::all_of(page, page + page_bytes, [](uint8_t b) { return b == 0xFF; })) << "spare " << p;
      }
    }
    if (mix == RealKvMix::kAllFp8) EXPECT_EQ(pages.pools[RealKvPages::kTq3].used_pages(), 0);
    if (mix == RealKvMix::kAllTq3) EXPECT_EQ(pages.pools[RealKvPages::kFp8].used_pages(), 0);
    if (mix == RealKvMix::kMinima) {
      EXPECT_GT(pages.pools[RealKvPages::kFp8].used_pages(), 0);
      EXPECT_GT(pages.pools[RealKvPages::kTq3].used_pages(), 0);
    }
  }
}

TEST(RealKvCheckTest, ComparisonPassesTheCpuOutputAndFailsBadOnes) {
  const KvCapture c = SyntheticCapture();
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(c.head_dim, c.rotation_seed, &rotation).ok());
  for (RealKvMix mix : kAllRealKvMixes) {
    RealKvPages pages;
    ASSERT_TRUE(BuildRealKvPages(c, 0, mix, 1, &pages).ok());
    RealKvCpuSide cpu;
    const Status s = ComputeRealKvCpuSide(c, 0, pages, rotation, 2, &cpu);
    ASSERT_TRUE(s.ok()) << s.ToString();
    // The CPU output checked against itself: exact, and its own figures against the references.
    std::vector<RealKvRow> rows;
    ASSERT_TRUE(
        CompareRealKv(c, 0, pages, cpu, cpu.out.data(), cpu.lse_log2.data(), nullptr, kRealKvMaxRelL2, &rows).ok());
    ASSERT_EQ(rows.size(), size_t(c.num_queries));
    for (const RealKvRow& r : rows) {
      EXPECT_TRUE(r.pass) << RealKvTableRow(r);
      EXPECT_EQ(r.layer, 2);
      EXPECT_EQ(r.gpu_vs_cpu_rel_l2, 0.0);
      EXPECT_EQ(r.gpu_vs_dense_rel_l2, r.cpu_vs_dense_rel_l2);
      EXPECT_LT(r.cpu_vs_pages_rel_l2, 1e-4) << RealKvTableRow(r);  // the kernel on its pages
      // Random queries attend diffusely, so outputs are small averages and 3-bit noise is large against them
      // (all-TQ3 measured 0.27, cosine 0.93): loose bounds that only catch a broken format.
      EXPECT_LT(r.cpu_vs_dense_rel_l2, 0.5) << RealKvTableRow(r);
      EXPECT_GT(r.cpu_vs_dense_cos_min, 0.85) << RealKvTableRow(r);
      if (mix == RealKvMix::kAllFp8) EXPECT_LT(r.cpu_vs_dense_rel_l2, 0.05) << RealKvTableRow(r);
    }
    // A perturbed output (relative error ~1e-2) and a NaN fail; the JSON says so.
    std::vector<float> bad = cpu.out;
    for (size_t i = 0; i < bad.size(); ++i) bad[i] *= (i % 2 ? 1.01f : 0.99f);
    rows.clear();
    ASSERT_TRUE(CompareRealKv(c, 0, pages, cpu, bad.data(), cpu.lse_log2.data(), nullptr, kRealKvMaxRelL2, &rows).ok());
    for (const RealKvRow& r : rows) {
      EXPECT_FALSE(r.pass);
      EXPECT_NEAR(r.gpu_vs_cpu_rel_l2, 0.01, 2e-3);
      EXPECT_NE(RealKvRowJson(r).find("\"pass\": false"), std::string::npos);
    }
    bad = cpu.out;
    bad[5] = NAN;
    rows.clear();
    ASSERT_TRUE(CompareRealKv(c, 0, pages, cpu, bad.data(), cpu.lse_log2.data(), nullptr, kRealKvMaxRelL2, &rows).ok());
    EXPECT_FALSE(rows[0].pass);
    EXPECT_TRUE(rows[1].pass);
    EXPECT_NE(RealKvTableRow(rows[0]).find("FAIL"), std::string::npos);
    std::vector<float> bad_lse = cpu.lse_log2;
    bad_lse[c.num_q_heads] += 0.5f;  // query 1
    rows.clear();
    ASSERT_TRUE(CompareRealKv(c, 0, pages, cpu, cpu.out.data(), bad_lse.data(), nullptr, kRealKvMaxRelL2, &rows).ok());
    EXPECT_TRUE(rows[0].pass);
    EXPECT_FALSE(rows[1].pass);
    // A replay: identical passes; one that drifts by ~1e-2 fails and is reported as not identical.
    rows.clear();
    ASSERT_TRUE(
        CompareRealKv(c, 0, pages, cpu, cpu.out.data(), cpu.lse_log2.data(), cpu.out.data(), kRealKvMaxRelL2, &rows).ok());
    EXPECT_TRUE(rows[2].pass && rows[2].replay_identical);
    EXPECT_NE(RealKvTableRow(rows[2]).find("same"), std::string::npos);
    bad = cpu.out;
    for (size_t i = 0; i < bad.size(); ++i) bad[i] *= 1.01f;
    rows.clear();
    ASSERT_TRUE(
        CompareRealKv(c, 0, pages, cpu, cpu.out.data(), cpu.lse_log2.data(), bad.data(), kRealKvMaxRelL2, &rows).ok());
    EXPECT_FALSE(rows[2].pass);
    EXPECT_FALSE(rows[2].replay_identical);
    EXPECT_NEAR(rows[2].replay_rel_l2, 0.01, 1e-4);
    EXPECT_NE(RealKvRowJson(rows[2]).find("\"replay_identical\": false"), std::string::npos);
  }
  EXPECT_EQ(CompareRealKv(c, 0, RealKvPages(), RealKvCpuSide(), nullptr, nullptr, nullptr, 1e-3, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(RealKvCheckTest, WorstRowKeepsTheLargestErrorsAndAnyNan) {
  RealKvRow a, b;
  a.context_tokens = 10, a.gpu_vs_cpu_rel_l2 = 1e-6, a.gpu_vs_dense_cos_min = 0.99, a.pass = true;
  b.context_tokens = 11, b.tq3_pages = 3, b.gpu_vs_cpu_rel_l2 = 2e-6, b.gpu_vs_dense_cos_min = 0.98, b.pass = true;
  RealKvRow w = WorstRealKvRow({a, b});
  EXPECT_EQ(w.query, -1);
  EXPECT_EQ(w.context_tokens, 11);
  EXPECT_EQ(w.tq3_pages, 3);
  EXPECT_EQ(w.gpu_vs_cpu_rel_l2, 2e-6);
  EXPECT_EQ(w.gpu_vs_dense_cos_min, 0.98);
  EXPECT_TRUE(w.pass);
  EXPECT_NE(RealKvTableRow(w).find("  *"), std::string::npos);
  b.gpu_vs_cpu_rel_l2 = NAN;
  b.pass = false;
  w = WorstRealKvRow({a, b});
  EXPECT_TRUE(std::isnan(w.gpu_vs_cpu_rel_l2));
  EXPECT_FALSE(w.pass);
  EXPECT_NE(RealKvRowJson(w).find("\"gpu_vs_cpu_rel_l2\": null"), std::string::npos);
}

// The CPU half on a real capture (512-token passkey prompt, policy scaled down so that the minima mix has TQ3
// pages): the CPU kernels agree with fp64 on their pages, and each format's error against the dense K/V is that
// of its bits (FP8 small, TQ3 larger, the mix in between).
TEST(RealKvCheckTest, RealModelCaptureThroughTheCpuHalf) {
  std::unique_ptr<LlamaModel> model;
  if (!LlamaModel::Load(DefaultModelPath(), &model).ok()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  PasskeyCase pc;
  ASSERT_TRUE(BuildPasskeyCase(model->tokenizer(), 512, 0.5, 1, &pc).ok());
  KvCaptureOptions options;
  options.layers = {0, 15};
  options.num_queries = 2;
  options.anchor_tokens = 64;
  options.recent_tokens = 128;
  KvCapture c;
  ASSERT_TRUE(CaptureModelKv(*model, pc.prompt_ids, options, &c).ok());
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(c.head_dim, c.rotation_seed, &rotation).ok());
  for (size_t slot = 0; slot < c.layers.size(); ++slot) {
    double dense_error[3] = {};
    for (RealKvMix mix : kAllRealKvMixes) {
      RealKvPages pages;
      ASSERT_TRUE(BuildRealKvPages(c, slot, mix, 2, &pages).ok());
      RealKvCpuSide cpu;
      ASSERT_TRUE(ComputeRealKvCpuSide(c, slot, pages, rotation, 2, &cpu).ok());
      std::vector<RealKvRow> rows;
      ASSERT_TRUE(
          CompareRealKv(c, slot, pages, cpu, cpu.out.data(), cpu.lse_log2.data(), nullptr, kRealKvMaxRelL2, &rows).ok());
      const RealKvRow w = WorstRealKvRow(rows);
      EXPECT_TRUE(w.pass) << RealKvTableRow(w);
      EXPECT_LT(w.cpu_vs_pages_rel_l2, 1e-4) << RealKvTableRow(w);
      EXPECT_GT(w.cpu_vs_dense_cos_min, 0.9) << RealKvTableRow(w);
      dense_error[int(mix)] = w.cpu_vs_dense_rel_l2;
      if (mix == RealKvMix::kMinima) EXPECT_GT(w.tq3_pages, 0);
    }
    const double minima = dense_error[int(RealKvMix::kMinima)], fp8 = dense_error[int(RealKvMix::kAllFp8)],
                 tq3 = dense_error[int(RealKvMix::kAllTq3)];
    EXPECT_LT(fp8, 0.15) << "layer " << c.layers[slot].layer;  // measured 0.016 (layer 0), 0.082 (layer 15)
    EXPECT_LE(fp8, minima) << "layer " << c.layers[slot].layer;
    EXPECT_LE(minima, tq3) << "layer " << c.layers[slot].layer;
  }
}

TEST(RealKvCheckTest, ParsesMixNamesAndRejectsBadSlots) {
  RealKvMix mix;
  ASSERT_TRUE(ParseRealKvMix("tq3", &mix).ok());
  EXPECT_EQ(mix, RealKvMix::kAllTq3);
  EXPECT_NE(ParseRealKvMix("int4", &mix).message().find("'int4'"), std::string::npos);
  RealKvPages pages;
  EXPECT_EQ(BuildRealKvPages(SyntheticCapture(), 2, RealKvMix::kMinima, 1, &pages).code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(RealKvTableHeader().find("gpu~cpu"), std::string::npos);
}

}  // namespace
}  // namespace minimakv
