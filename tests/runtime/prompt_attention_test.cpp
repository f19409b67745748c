// The AVX-512 in-prompt attention against the scalar reference (runtime/prompt_attention.h): odd token counts
// (partial row blocks and key tiles), key offsets (dense mode's later chunks), head dims 16..128 (1..8 zmm,
// split value passes), GQA groups 1..7, 1 and 2 threads, with and without the fp16-weight emulation.
#include "runtime/prompt_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <vector>

#include "minimakv/thread_pool.h"

namespace minimakv {
namespace {

struct Shape {
  int64_t tokens;
  int64_t key_offset;
  int num_q_heads;
  int num_kv_heads;
  int head_dim;
};

struct Result {
  std::vector<float> out, lse;
};

Result RunAttention(const Shape& s, bool round_weights, int threads, bool force_scalar, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t q_dim = int64_t(s.num_q_heads) * s.head_dim, kv_dim = int64_t(s.num_kv_heads) * s.head_dim;
  const int64_t keys = s.key_offset + s.tokens;
  std::vector<float> q(size_t(s.tokens * q_dim)), k(size_t(keys * kv_dim)), v(size_t(keys * kv_dim));
  // Scores of a few units (as in the model after RoPE): the softmax is neither flat nor one-hot.
  for (float& x : q) x = 0.5f * dist(rng);
  for (float& x : k) x = 0.5f * dist(rng);
  for (float& x : v) x = dist(rng);
  Result r;
  r.out.assign(size_t(s.tokens * q_dim), NAN);
  r.lse.assign(size_t(s.tokens * s.num_q_heads), NAN);
  PromptAttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.kv_stride = kv_dim;
  a.tokens = s.tokens;
  a.key_offset = s.key_offset;
  a.num_q_heads = s.num_q_heads;
  a.num_kv_heads = s.num_kv_heads;
  a.head_dim = s.head_dim;
  a.sm_scale = 1.0f / std::sqrt(float(s.head_dim));
  a.round_weights_fp16 = round_weights;
  a.out = r.out.data();
  a.lse_log2 = r.lse.data();
  ThreadPool pool(threads);
  PromptAttentionScratch scratch;
  PromptAttention(a, &pool, &scratch, force_scalar);
  return r;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  }
  return m;
}

const Shape kShapes[] = {
    {1, 0, 9, 3, 64},     // a single token (dense decode)
    {5, 0, 9, 3, 64},     // one partial row block
    {77, 0, 9, 3, 64},    // SmolLM2's heads; partial token tile and key tile
    {131, 37, 9, 3, 64},  // a later dense chunk: keys before the queries
    {1, 300, 9, 3, 64},   // decode over 300 keys
    {50, 0, 4, 4, 32},    // no GQA, 2 zmm per head
    {33, 7, 4, 1, 128},   // head_dim 128: two value passes
    {29, 3, 14, 2, 48},   // group 7, 3 zmm
    {70, 0, 2, 2, 16},    // one zmm
    {65, 0, 3, 3, 80},    // 4 + 1 zmm of value dims
};

TEST(PromptAttention, SimdMatchesScalarReference) {
  for (const Shape& s : kShapes) {
    if (!PromptAttentionUsesSimd(s.head_dim, s.num_q_heads / s.num_kv_heads)) GTEST_SKIP() << "no AVX-512";
    for (int threads : {1, 2}) {
      const Result ref = RunAttention(s, false, threads, true, 11);
      const Result simd = RunAttention(s, false, threads, false, 11);
      const std::string what = "tokens " + std::to_string(s.tokens) + " offset " + std::to_string(s.key_offset) +
                               " heads " + std::to_string(s.num_q_heads) + "/" + std::to_string(s.num_kv_heads) +
                               " dim " + std::to_string(s.head_dim) + " threads " + std::to_string(threads);
      // fp32 summation order and the polynomial exp (a few ulp): outputs are O(1).
      EXPECT_LT(MaxAbsDiff(simd.out, ref.out), 2e-6) << what;
      EXPECT_LT(MaxAbsDiff(simd.lse, ref.lse), 2e-6) << what;
    }
  }
}

// Dense mode's llama.cpp emulation rounds each normalized weight to fp16: a weight whose exact value sits near
// a rounding boundary may land one fp16 step (2^-11 relative) away from the reference's, so elements may
// differ by up to ~5e-4 * |v|; almost all agree to fp32 summation order.
TEST(PromptAttention, SimdMatchesScalarWithFp16Weights) {
  for (const Shape& s : kShapes) {
    if (!PromptAttentionUsesSimd(s.head_dim, s.num_q_heads / s.num_kv_heads)) GTEST_SKIP() << "no AVX-512";
    const Result ref = RunAttention(s, true, 2, true, 12);
    const Result simd = RunAttention(s, true, 2, false, 12);
    EXPECT_LT(MaxAbsDiff(simd.out, ref.out), 2e-3) << s.tokens << " tokens, dim " << s.head_dim;
    int64_t loose = 0;
    for (size_t i = 0; i < ref.out.size(); ++i) loose += std::fabs(simd.out[i] - ref.out[i]) > 2e-6f;
    EXPECT_LE(double(loose), 0.02 * double(ref.out.size())) << s.tokens << " tokens, dim " << s.head_dim;
    // Emulated rounding is really applied: the result differs from unrounded weights (with one key the only
    // weight is exactly 1).
    const Result plain = RunAttention(s, false, 2, false, 12);
    if (s.key_offset + s.tokens > 1) EXPECT_GT(MaxAbsDiff(simd.out, plain.out), 1e-5);
  }
}

// Keys after a query's position never reach it: changing the last key changes only the last token.
TEST(PromptAttention, CausalMaskInSimdPath) {
  const Shape s = {70, 0, 9, 3, 64};
  if (!PromptAttentionUsesSimd(s.head_dim, 3)) GTEST_SKIP() << "no AVX-512";
  const int64_t q_dim = 9 * 64, kv_dim = 3 * 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(size_t(s.tokens * q_dim)), k(size_t(s.tokens * kv_dim)), v(k.size());
  for (float& x : q) x = dist(rng);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  auto run = [&]() {
    std::vector<float> out(q.size());
    PromptAttentionArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.kv_stride = kv_dim;
    a.tokens = s.tokens;
    a.num_q_heads = 9;
    a.num_kv_heads = 3;
    a.head_dim = 64;
    a.sm_scale = 0.125f;
    a.out = out.data();
    ThreadPool pool(2);
    PromptAttentionScratch scratch;
    PromptAttention(a, &pool, &scratch);
    return out;
  };
  const std::vector<float> before = run();
  for (int64_t i = (s.tokens - 1) * kv_dim; i < s.tokens * kv_dim; ++i) {
    k[size_t(i)] += 5.0f;
    v[size_t(i)] -= 3.0f;
  }
  const std::vector<float> after = run();
  const size_t last = size_t((s.tokens - 1) * q_dim);
  EXPECT_TRUE(std::equal(before.begin(), before.begin() + ptrdiff_t(last), after.begin()));
  EXPECT_FALSE(std::equal(before.begin() + ptrdiff_t(last), before.end(), after.begin() + ptrdiff_t(last)));
}

TEST(ThreadPool, EveryIndexOnceInBothModes) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 100, 1001}) {
      for (int64_t grain : {1, 3, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        auto count = [&](int64_t b, int64_t e) {
          EXPECT_EQ(b % grain, 0);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        };
        pool.ParallelFor(n, grain, count);
        pool.ParallelForEach(n, grain, count);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 2) << n << " " << grain << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace minimakv
