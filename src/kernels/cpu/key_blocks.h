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

// The blocks of a task in token order: `for (KeyBlocks blocks(task); blocks.Next(&block);)`. A cursor rather
// than a callback so the kernels' block stages (functions with per-function target attributes) inline into the
// loop body; a lambda would not carry the kernel's target attribute. kHasScales: the format stores per-vector
// scales (FP8, TQ3), whose next runs are prefetched.
template <int kBlockKeys, bool kHasScales>
class KeyBlocks {
 public:
  explicit KeyBlocks(const KernelTask& task) : task_(task), layout_(task.view->layout) {}

  // Fills *block with the next block and returns true; false after the last one.
  bool Next(KeyBlock* block) {
    if (page_ >= task_.num_pages) return false;
    const uint8_t* page = PageBase(page_);
    const int tokens = PageTokens(page_);
    block->page = page;
    block->t0 = t0_;
    block->n = std::min(kBlockKeys, tokens - t0_);
    block->next_keys = nullptr;
    block->next_n = 0;
    // Advance; the block after this one is the same page further on, else the next page's first block.
    t0_ += kBlockKeys;
    if (t0_ >= tokens) {
      ++page_;
      t0_ = 0;
    }
    if (page_ < task_.num_pages) {
      const uint8_t* next_page = PageBase(page_);
      block->next_n = std::min(kBlockKeys, PageTokens(page_) - t0_);
      block->next_keys = next_page + layout_.k_codes_offset(task_.kv_head, t0_);
      if constexpr (kHasScales) {
        const size_t scale_bytes = size_t(block->next_n) * layout_.scale_bytes();
        PrefetchL2(next_page + layout_.k_scale_offset(task_.kv_head, t0_), scale_bytes);
        PrefetchL2(next_page + layout_.v_scale_offset(task_.kv_head, t0_), scale_bytes);
      }
    }
    return true;
  }

 private:
  int PageTokens(int p) const { return p + 1 == task_.num_pages ? task_.last_page_tokens : layout_.page_tokens; }
  const uint8_t* PageBase(int p) const { return task_.view->pages + size_t(task_.page_ids[p]) * layout_.page_bytes(); }

  const KernelTask& task_;
  const PageLayout& layout_;
  int page_ = 0;  // page of the next block
  int t0_ = 0;    // its first token in that page
};

}  // namespace minimakv::cpu
