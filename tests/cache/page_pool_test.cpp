#include "minimakv/page_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cache/cache_test_util.h"

namespace minimakv {
namespace {

PageLayout TinyLayout() {
  PageLayout layout;
  layout.format = KvFormat::kFp8;
  layout.kv_heads = 1;
  layout.head_dim = 64;
  layout.page_tokens = 4;
  return layout;  // payload 2 * 4 * (64 + 4) = 544 bytes -> page 576 bytes
}

TEST(PagePool, CapacityFromBudgetAndAlignment) {
  std::unique_ptr<PagePool> pool;
  const PageLayout layout = TinyLayout();
  ASSERT_EQ(layout.page_bytes(), 576u);
  ASSERT_TRUE(PagePool::Create(layout, 3 * 576 + 575, &pool).ok());
  EXPECT_EQ(pool->capacity_pages(), 3);
  EXPECT_EQ(pool->free_pages(), 3);
  EXPECT_EQ(pool->live_pages(), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->base()) % kPageAlignBytes, 0u);
  EXPECT_EQ(pool->FreeListTopFirst(), (std::vector<int32_t>{0, 1, 2}));
}

TEST(PagePool, BudgetBelowOnePageIsAnError) {
  std::unique_ptr<PagePool> pool;
  const Status status = PagePool::Create(TinyLayout(), 575, &pool);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("575"), std::string::npos) << status.message();
  EXPECT_EQ(pool, nullptr);
}

TEST(PagePool, AllocateReleaseLifoOrderAndRefCounts) {
  std::unique_ptr<PagePool> pool;
  ASSERT_TRUE(PagePool::Create(TinyLayout(), 3 * 576, &pool).ok());
  int32_t a = -1, b = -1, c = -1, d = -1;
  ASSERT_TRUE(pool->Allocate(&a).ok());
  ASSERT_TRUE(pool->Allocate(&b).ok());
  ASSERT_TRUE(pool->Allocate(&c).ok());
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 2);
  EXPECT_EQ(pool->free_pages(), 0);

  const Status full = pool->Allocate(&d);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("fp8 page pool is full"), std::string::npos) << full.message();
  EXPECT_EQ(d, -1);

  ASSERT_TRUE(pool->AddRef(1).ok());
  EXPECT_EQ(pool->ref_count(1), 2);
  bool freed = true;
  ASSERT_TRUE(pool->Release(1, &freed).ok());
  EXPECT_FALSE(freed);
  EXPECT_EQ(pool->ref_count(1), 1);

  ASSERT_TRUE(pool->Release(0, &freed).ok());
  EXPECT_TRUE(freed);
  ASSERT_TRUE(pool->Release(2, &freed).ok());
  EXPECT_TRUE(freed);
  // LIFO: the last page released is the next allocated.
  EXPECT_EQ(pool->FreeListTopFirst(), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(pool->ref_count(0), 0);
  EXPECT_EQ(pool->live_pages(), 1);
  ASSERT_TRUE(pool->Allocate(&d).ok());
  EXPECT_EQ(d, 2);
  EXPECT_EQ(pool->FreeListTopFirst(), (std::vector<int32_t>{0}));

  // Releasing or sharing a free page, or an id out of range, is an error and changes nothing.
  EXPECT_EQ(pool->Release(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->AddRef(0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->AddRef(3).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->Release(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->FreeListTopFirst(), (std::vector<int32_t>{0}));
  EXPECT_EQ(pool->ref_count(0), 0);
}

// The count is an int32_t: at kMaxPageRefs one more AddRef is an error that names the page and changes nothing.
TEST(PagePool, AddRefStopsAtTheLargestCount) {
  std::unique_ptr<PagePool> pool;
  ASSERT_TRUE(PagePool::Create(TinyLayout(), 2 * 576, &pool).ok());
  int32_t page = -1;
  ASSERT_TRUE(pool->Allocate(&page).ok());
  PagePoolTestPeer::SetRefCount(pool.get(), page, PagePool::kMaxPageRefs - 1);
  ASSERT_TRUE(pool->AddRef(page).ok());
  EXPECT_EQ(pool->ref_count(page), PagePool::kMaxPageRefs);
  const Status more = pool->AddRef(page);
  EXPECT_EQ(more.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(more.message().find("fp8 page 0 already holds 2147483647 references"), std::string::npos)
      << more.message();
  EXPECT_EQ(pool->ref_count(page), PagePool::kMaxPageRefs);
  bool freed = true;
  ASSERT_TRUE(pool->Release(page, &freed).ok());
  EXPECT_FALSE(freed);
  EXPECT_EQ(pool->ref_count(page), PagePool::kMaxPageRefs - 1);
}

TEST(PagePool, AllocatedPagesAreZeroed) {
  std::unique_ptr<PagePool> pool;
  ASSERT_TRUE(PagePool::Create(TinyLayout(), 2 * 576, &pool).ok());
  int32_t id = -1;
  ASSERT_TRUE(pool->Allocate(&id).ok());
  std::memset(pool->page_data(id), 0xAB, pool->page_bytes());
  ASSERT_TRUE(pool->Release(id).ok());
  int32_t again = -1;
  ASSERT_TRUE(pool->Allocate(&again).ok());
  ASSERT_EQ(again, id);
  for (size_t i = 0; i < pool->page_bytes(); ++i) ASSERT_EQ(pool->page_data(again)[i], 0) << "byte " << i;
  EXPECT_EQ(pool->page_data(1), pool->base() + 576);
}

}  // namespace
}  // namespace minimakv
