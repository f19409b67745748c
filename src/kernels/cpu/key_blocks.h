// The walk over a task's keys in blocks, shared by the AVX-512 and AMX kernels (kernels/cpu/
// cpu_kernels_avx512.cpp, cpu_kernels_amx.cpp): page by page, blocks of at most kBlockKeys tokens of one page,
// each with the block after it (same page further on, else the next listed page's first block) so a kernel
// can prefetch it while working on this one. The next block's scales are prefetched here: two short runs that
// a kernel's key prefetch does not cover.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "minimakv/page_layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>
#endif

namespace minimakv::cpu {

inline constexpr size_t kCacheLineBytes = 64;

// Software prefetch of `bytes` bytes from `p` into L2: pages are scattered in the pool, so the hardware
// streamer (which stops at 4 KiB boundaries) alone leaves a core short of memory-level parallelism.
inline void PrefetchL2(const uint8_t* p, size_t bytes) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  for (size_t offset = 0; offset < bytes; offset += kCacheLineBytes) {
    _mm_prefetch(reinterpret_cast<const char*>(p + offset), _MM_HINT_T1);
  }
#else
  (void)p;
  (void)bytes;
#endif
}

// One block of keys: tokens [t0, t0 + n) of `page`, and where the next block starts (next_keys null and
// next_n 0 when this is the task's last block).
struct KeyBlock {
  const uint8_t* page = nullptr;
  int t0 = 0;
  int n = 0;
  const uint8_t* next_keys = nullptr;  // key codes of the next block
  int next_n = 0;
};

// Calls fn(const KeyBlock&) for every block of the task, in token order. kHasScales: the format stores
// per-vector scales (FP8, TQ3), whose next runs are prefetched.
template <int kBlockKeys, bool kHasScales, typename Fn>
inline void ForEachKeyBlock(const KernelTask& task, Fn&& fn) {
  const PageLayout& layout = task.view->layout;
  auto page_tokens = [&](int p) { return p + 1 == task.num_pages ? task.last_page_tokens : layout.page_tokens; };
  auto page_base = [&](int p) { return task.view->pages + size_t(task.page_ids[p]) * layout.page_bytes(); };
  for (int p = 0; p < task.num_pages; ++p) {
    const uint8_t* page = page_base(p);
    const int tokens = page_tokens(p);
    for (int t0 = 0; t0 < tokens; t0 += kBlockKeys) {
      KeyBlock block;
      block.page = page;
      block.t0 = t0;
      block.n = std::min(kBlockKeys, tokens - t0);
      const uint8_t* next_page = page;
      int next_t0 = t0 + kBlockKeys;
      if (next_t0 < tokens) {
        block.next_n = std::min(kBlockKeys, tokens - next_t0);
      } else if (p + 1 < task.num_pages) {
        next_page = page_base(p + 1);
        next_t0 = 0;
        block.next_n = std::min(kBlockKeys, page_tokens(p + 1));
      }
      if (block.next_n > 0) {
        block.next_keys = next_page + layout.k_codes_offset(task.kv_head, next_t0);
        if constexpr (kHasScales) {
          const size_t scale_bytes = size_t(block.next_n) * layout.scale_bytes();
          PrefetchL2(next_page + layout.k_scale_offset(task.kv_head, next_t0), scale_bytes);
          PrefetchL2(next_page + layout.v_scale_offset(task.kv_head, next_t0), scale_bytes);
        }
      }
      fn(block);
    }
  }
}

}  // namespace minimakv::cpu
