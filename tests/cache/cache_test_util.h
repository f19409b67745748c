// Helpers shared by the cache tests: random K/V, tiny configs, whole-cache snapshots.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "minimakv/page_pool.h"
#include "minimakv/paged_cache.h"

namespace minimakv {

// Reaches into a pool to set a page's reference count directly, for the int32 limit (2^31 AddRefs or forks
// would take seconds, or the memory of 2^31 sequences).
struct PagePoolTestPeer {
  static void SetRefCount(const PagePool* pool, int32_t page_id, int32_t count) {
    const_cast<PagePool*>(pool)->ref_counts_[size_t(page_id)] = count;
  }
};

}  // namespace minimakv

namespace minimakv::cache_test {

// [num_tokens][kv_heads][head_dim] standard normal values.
inline std::vector<float> RandomTokens(int num_tokens, int kv_heads, int head_dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(size_t(num_tokens) * kv_heads * head_dim);
  for (float& x : values) x = normal(rng);
  return values;
}

// Every token of every live sequence and layer decoded, plus the raw bytes of every pool: equal snapshots
// mean the cache is byte-for-byte the same.
struct CacheSnapshot {
  std::vector<float> decoded;
  std::vector<uint8_t> pool_bytes;
  std::vector<int32_t> free_lists;
  std::vector<int32_t> ref_counts;
  KvAccounting accounting;
  friend bool operator==(const CacheSnapshot&, const CacheSnapshot&) = default;
};

inline CacheSnapshot Snapshot(const PagedCache& cache) {
  CacheSnapshot snapshot;
  const CacheConfig& config = cache.config();
  const size_t vector_floats = size_t(config.kv_heads) * config.head_dim;
  std::vector<float> k(vector_floats), v(vector_floats);
  for (SeqId seq : cache.Sequences()) {
    for (int layer = 0; layer < config.num_layers; ++layer) {
      for (int64_t t = 0; t < cache.SeqTokens(seq, layer); ++t) {
        if (!cache.DecodeToken(seq, layer, t, k.data(), v.data()).ok()) continue;
        snapshot.decoded.insert(snapshot.decoded.end(), k.begin(), k.end());
        snapshot.decoded.insert(snapshot.decoded.end(), v.begin(), v.end());
      }
    }
  }
  for (int f = 0; f < kNumKvFormats; ++f) {
    const PagePool* pool = cache.Pool(KvFormat(f));
    if (pool == nullptr) continue;
    const uint8_t* base = pool->base();
    snapshot.pool_bytes.insert(snapshot.pool_bytes.end(), base, base + size_t(pool->capacity_pages()) * pool->page_bytes());
    const std::vector<int32_t> free_list = pool->FreeListTopFirst();
    snapshot.free_lists.insert(snapshot.free_lists.end(), free_list.begin(), free_list.end());
    snapshot.free_lists.push_back(-1);
    for (int32_t p = 0; p < pool->capacity_pages(); ++p) snapshot.ref_counts.push_back(pool->ref_count(p));
  }
  snapshot.accounting = cache.Accounting();
  return snapshot;
}

}  // namespace minimakv::cache_test
