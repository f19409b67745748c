#include "minimakv/page_pool.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace minimakv {

Status PagePool::Create(const PageLayout& layout, size_t budget_bytes, std::unique_ptr<PagePool>* out) {
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(layout));
  const size_t page_bytes = layout.page_bytes();
  const size_t capacity = budget_bytes / page_bytes;
  if (capacity == 0) {
    return Status::InvalidArgument(std::string(KvFormatName(layout.format)) + " pool budget " +
                                   std::to_string(budget_bytes) + " bytes holds no page (one page is " +
                                   std::to_string(page_bytes) + " bytes)");
  }
  if (capacity > size_t(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(std::string(KvFormatName(layout.format)) + " pool budget " +
                                   std::to_string(budget_bytes) + " bytes gives " + std::to_string(capacity) +
                                   " pages, more than int32 page ids can address");
  }
  // page_bytes is a multiple of kPageAlignBytes, so the total is too (aligned_alloc requires it).
  void* memory = std::aligned_alloc(kPageAlignBytes, capacity * page_bytes);
  if (memory == nullptr) {
    return Status::ResourceExhausted("cannot reserve " + std::to_string(capacity * page_bytes) + " bytes for the " +
                                     std::string(KvFormatName(layout.format)) + " pool");
  }
  std::unique_ptr<PagePool> pool(new PagePool());
  pool->layout_ = layout;
  pool->page_bytes_ = page_bytes;
  pool->capacity_pages_ = int32_t(capacity);
  pool->base_ = static_cast<uint8_t*>(memory);
  pool->ref_counts_.assign(capacity, 0);
  pool->free_list_.resize(capacity);
  // Stack with page 0 on top: a fresh pool allocates 0, 1, 2, ...
  for (size_t i = 0; i < capacity; ++i) pool->free_list_[i] = int32_t(capacity - 1 - i);
  *out = std::move(pool);
  return Status::Ok();
}

PagePool::~PagePool() { std::free(base_); }

Status PagePool::Allocate(int32_t* page_id) {
  if (free_list_.empty()) {
    return Status::ResourceExhausted(std::string(KvFormatName(layout_.format)) + " page pool is full: all " +
                                     std::to_string(capacity_pages_) + " pages of " + std::to_string(page_bytes_) +
                                     " bytes are live");
  }
  const int32_t id = free_list_.back();
  free_list_.pop_back();
  ref_counts_[size_t(id)] = 1;
  std::memset(page_data(id), 0, page_bytes_);
  *page_id = id;
  return Status::Ok();
}

Status PagePool::AddRef(int32_t page_id) {
  if (page_id < 0 || page_id >= capacity_pages_ || ref_counts_[size_t(page_id)] == 0) {
    return Status::InvalidArgument("AddRef on " + std::string(KvFormatName(layout_.format)) + " page " +
                                   std::to_string(page_id) + " which is not live");
  }
  if (ref_counts_[size_t(page_id)] == kMaxPageRefs) {
    return Status::ResourceExhausted(std::string(KvFormatName(layout_.format)) + " page " + std::to_string(page_id) +
                                     " already holds " + std::to_string(kMaxPageRefs) +
                                     " references, the most a page can hold");
  }
  ++ref_counts_[size_t(page_id)];
  return Status::Ok();
}

Status PagePool::Release(int32_t page_id, bool* freed) {
  if (freed != nullptr) *freed = false;
  if (page_id < 0 || page_id >= capacity_pages_ || ref_counts_[size_t(page_id)] == 0) {
    return Status::InvalidArgument("Release of " + std::string(KvFormatName(layout_.format)) + " page " +
                                   std::to_string(page_id) + " which is not live");
  }
  if (--ref_counts_[size_t(page_id)] == 0) {
    free_list_.push_back(page_id);
    if (freed != nullptr) *freed = true;
  }
  return Status::Ok();
}

int32_t PagePool::ref_count(int32_t page_id) const {
  if (page_id < 0 || page_id >= capacity_pages_) return 0;
  return ref_counts_[size_t(page_id)];
}

std::vector<int32_t> PagePool::FreeListTopFirst() const { return {free_list_.rbegin(), free_list_.rend()}; }

}  // namespace minimakv
