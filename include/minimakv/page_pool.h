// PagePool: fixed-size, ref-counted KV pages of ONE format in one contiguous, 64-byte aligned host buffer.
// A kernel finds page p at base() + p * page_bytes() (the PagedKvView contract, paged_kv_view.h).
//
// Memory: the whole buffer (capacity_pages() * page_bytes() bytes) is reserved up front by Create, so base()
// never moves while the pool lives; the OS commits it on first touch. Allocate() zeroes the page it hands
// out, so unused tail slots and alignment padding are deterministic bytes (byte-for-byte comparisons work).
//
// Free list order: LIFO. A fresh pool hands out pages 0, 1, 2, ... in order; Release() of the last
// reference pushes the page on top, so the most recently freed page is the next one allocated (its bytes
// are likely still in cache).
//
// INVARIANTS (checked by tests/cache/):
//   * every page id in [0, capacity_pages()) is either free with ref_count 0 (and on the free list exactly
//     once) or live with ref_count >= 1 (and not on the free list), never both;
//   * free_pages() + live_pages() == capacity_pages().
// Not thread-safe: the owner (PagedCache) serializes every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "minimakv/page_layout.h"
#include "minimakv/status.h"

namespace minimakv {

class PagePool {
 public:
  // capacity_pages = budget_bytes / layout.page_bytes() (rounded down).
  // InvalidArgument if the layout is bad (CheckPageLayout), if the budget holds no page at all, or if the
  // capacity exceeds INT32_MAX pages (page ids are int32 in PagedKvView).
  static Status Create(const PageLayout& layout, size_t budget_bytes, std::unique_ptr<PagePool>* out);

  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const PageLayout& layout() const { return layout_; }
  KvFormat format() const { return layout_.format; }
  size_t page_bytes() const { return page_bytes_; }
  int32_t capacity_pages() const { return capacity_pages_; }
  int32_t free_pages() const { return int32_t(free_list_.size()); }
  int32_t live_pages() const { return capacity_pages_ - free_pages(); }

  // Pops the top of the free list, zeroes the page, sets its ref_count to 1.
  // ResourceExhausted naming the format and capacity when no page is free (the pool is unchanged).
  Status Allocate(int32_t* page_id);
  // ref_count += 1. InvalidArgument for an id out of range or a free page; ResourceExhausted (the count
  // unchanged) for a page that already holds kMaxPageRefs references.
  Status AddRef(int32_t page_id);
  // The most references one page can hold (the count is an int32_t): 2^31 - 1 forks sharing one page.
  static constexpr int32_t kMaxPageRefs = 2147483647;
  // ref_count -= 1; at 0 the page goes on top of the free list and *freed (if non-null) is set to true.
  // InvalidArgument for an id out of range or a free page.
  Status Release(int32_t page_id, bool* freed = nullptr);

  // 0 for a free page or an id out of range.
  int32_t ref_count(int32_t page_id) const;
  bool is_live(int32_t page_id) const { return ref_count(page_id) > 0; }

  // REQUIRES: 0 <= page_id < capacity_pages().
  uint8_t* page_data(int32_t page_id) { return base_ + size_t(page_id) * page_bytes_; }
  const uint8_t* page_data(int32_t page_id) const { return base_ + size_t(page_id) * page_bytes_; }
  const uint8_t* base() const { return base_; }

  // The free list, next-to-allocate first (for tests and debugging).
  std::vector<int32_t> FreeListTopFirst() const;

 private:
  friend struct PagePoolTestPeer;  // tests: sets a page's count near kMaxPageRefs (2^31 AddRefs take seconds)
  PagePool() = default;

  PageLayout layout_;
  size_t page_bytes_ = 0;
  int32_t capacity_pages_ = 0;
  uint8_t* base_ = nullptr;            // 64-byte aligned, capacity_pages_ * page_bytes_ bytes
  std::vector<int32_t> ref_counts_;    // [capacity_pages_]
  std::vector<int32_t> free_list_;     // stack: back() is the next page Allocate() returns
};

}  // namespace minimakv
