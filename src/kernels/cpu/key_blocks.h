// The walk over a task's keys in blocks, shared by the AVX-512 and AMX kernels (kernels/cpu/
// cpu_kernels_avx512.cpp, cpu_kernels_amx.cpp): page by page, blocks of at most kBlockKeys tokens of one page,
// each with the block after it (same page further on, else the next listed page's first block) so a kernel
// can prefetch it while working on this one. The next block's scales are prefetched here: two short runs that
// a kernel's key prefetch does not cover. And the next block's key and value codes get a head start here
// (StartL2Streams): the kernels' own prefetches follow one pass behind.
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

// Bytes of each of `parts` slices of a `bytes`-byte run when a prefetch is spread over `parts` steps: whole cache
// lines, so consecutive slices never prefetch a line twice (the last slices may be short or empty).
inline size_t CacheLineSliceBytes(size_t bytes, size_t parts) {
  return (bytes + parts * kCacheLineBytes - 1) / (parts * kCacheLineBytes) * kCacheLineBytes;
}

// Slice `part` (of slice_bytes each) of the run [p, p + bytes) into L2: one step of a prefetch spread over a loop.
inline void PrefetchL2Slice(const uint8_t* p, size_t bytes, size_t part, size_t slice_bytes) {
  const size_t offset = part * slice_bytes;
  if (offset < bytes) PrefetchL2(p + offset, std::min(slice_bytes, bytes - offset));
}

// The hardware L2 streamer follows ascending misses within one 4 KiB page and starts afresh on each page; a
// block's key (or value) codes of one head span 3-16 KiB of a page (64 tokens x 48-256 bytes), so the streamer
// restarts several times per block, each time one demand miss late. Touching the first kStreamStartLines
// lines of every 4 KiB page of the next block one block early starts those streams while this block is
// computed. Session 10 (docs/BENCHMARKS.md section 3), in-process A/B at the Llama shape, 32K, 2 threads,
// caches flushed, median of 30 rounds, time with / without: bf16 0.88-0.94 (AVX-512), 0.92 (AMX); fp8 0.91-0.95;
// tq3 0.95; minima 0.97; 2 or 8 lines per page instead of 4: 0.90-0.95 (no better). Without the kernels' dense
// prefetches (these starts alone) BF16 took 1.28x the time, so the two work together.
inline constexpr int kStreamStartLines = 4;
inline constexpr uintptr_t kSmallPageBytes = 4096;

// Prefetches into L2 the first kStreamStartLines cache lines of every 4 KiB page that [p, p + bytes) touches.
inline void StartL2Streams(const uint8_t* p, size_t bytes) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  for (uintptr_t start = reinterpret_cast<uintptr_t>(p); start < end;
       start = (start & ~(kSmallPageBytes - 1)) + kSmallPageBytes) {
    for (uintptr_t line = start; line < std::min(end, start + kStreamStartLines * kCacheLineBytes);
         line += kCacheLineBytes) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
    }
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
      const size_t code_bytes = size_t(block->next_n) * layout_.code_bytes();
      StartL2Streams(block->next_keys, code_bytes);
      StartL2Streams(next_page + layout_.v_codes_offset(task_.kv_head, t0_), code_bytes);
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
