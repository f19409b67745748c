// The README's library example, compiled and run against the installed library by .ci/run so it stays true.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <vector>

#include "minimakv/cpu_attention.h"
#include "minimakv/paged_cache.h"

int main() {
  using namespace minimakv;
  constexpr int kTokens = 4096, kKvHeads = 8, kQHeads = 32, kHeadDim = 128;
  std::mt19937 rng(1);
  std::normal_distribution<float> gauss;
  std::vector<float> k(size_t(kTokens) * kKvHeads * kHeadDim), v(k.size()), q(size_t(kQHeads) * kHeadDim),
      out(q.size());
  for (float& x : k) x = gauss(rng);
  for (float& x : v) x = gauss(rng);
  for (float& x : q) x = gauss(rng);
  auto check = [](const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "readme_example: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  };
  // --- README example begins ---
  CacheConfig config;  // 64-token pages; policy: first 256 and last 1024 tokens FP8, the rest TQ3
  config.num_layers = 1, config.kv_heads = 8, config.head_dim = 128;
  config.pool_bytes[int(KvFormat::kFp8)] = config.pool_bytes[int(KvFormat::kTq3)] = 64 << 20;
  std::unique_ptr<PagedCache> cache;
  check(PagedCache::Create(config, &cache));
  SeqId seq;
  check(cache->AddSequence(&seq));
  check(cache->Append(seq, /*layer=*/0, k.data(), v.data(), kTokens));  // k, v: [tokens][8][128] fp32
  FormatViewStorage storage[2];
  PagedKvView views[2];  // one view per format; one kernel each, merged by log-sum-exp
  check(cache->BuildFormatView(0, {&seq, 1}, KvFormat::kFp8, &storage[0], &views[0]));
  check(cache->BuildFormatView(0, {&seq, 1}, KvFormat::kTq3, &storage[1], &views[1]));
  const int32_t q_indptr[] = {0, 1};  // one decode query token: q [1][32][128]
  const AttentionQueries queries{q.data(), q_indptr, /*num_seqs=*/1, /*num_q_heads=*/32, 1.0f / std::sqrt(128.0f)};
  check(AttendMixedCpu(views, queries, &cache->rotation(), out.data(), nullptr, {.num_threads = 2}));
  std::cout << cache->Accounting().ToString();
  // --- README example ends ---
  for (float x : out) {
    if (!std::isfinite(x)) return 1;
  }
  return 0;
}
