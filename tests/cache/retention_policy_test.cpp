#include "minimakv/retention_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "minimakv/page_layout.h"

namespace minimakv {
namespace {

// The policy read token by token (retention_policy.h's tier definitions), independent of the page arithmetic:
// page i of a sequence with n tokens is full and out of the recent window when all its tokens t satisfy
// t < n - recent; it is an anchor when one of its tokens is < anchor or inside a pin.
bool OutOfRecentWindow(int64_t page, int page_tokens, int64_t n, int recent) {
  for (int64_t t = page * page_tokens; t < (page + 1) * page_tokens; ++t) {
    if (t >= n || t >= n - recent) return false;
  }
  return true;
}
bool HoldsAnchorToken(int64_t page, int page_tokens, int anchor, const std::vector<TokenRange>& pins) {
  for (int64_t t = page * page_tokens; t < (page + 1) * page_tokens; ++t) {
    if (t < anchor) return true;
    for (const TokenRange& pin : pins) {
      if (pin.begin_token <= t && t < pin.end_token) return true;
    }
  }
  return false;
}

TEST(RetentionPolicy, PagesToConvertMatchesTheTokenByTokenDefinition) {
  std::mt19937_64 rng(2026);
  int cases = 0;
  for (int page_tokens : {1, 3, 16, 64}) {
    for (int anchor : {0, 5, 64, 100}) {
      for (int recent : {0, 1, 63, 64, 200}) {
        for (int draw = 0; draw < 12; ++draw) {
          RetentionPolicy policy;
          policy.anchor_tokens = anchor;
          policy.recent_tokens = recent;
          const int64_t old_tokens = int64_t(rng() % 400);
          const int64_t new_tokens = old_tokens + int64_t(rng() % 300);
          std::vector<TokenRange> pins;
          if (draw % 3 == 1) {
            const int64_t begin = int64_t(rng() % 500);
            pins.push_back({begin, begin + 1 + int64_t(rng() % 80)});
          }
          std::vector<int64_t> pages;
          ASSERT_TRUE(PagesToConvert(policy, page_tokens, old_tokens, new_tokens, pins, &pages).ok());
          std::vector<int64_t> expected;
          for (int64_t page = 0; page * page_tokens < new_tokens; ++page) {
            if (OutOfRecentWindow(page, page_tokens, new_tokens, recent) &&
                !OutOfRecentWindow(page, page_tokens, old_tokens, recent) &&
                !HoldsAnchorToken(page, page_tokens, anchor, pins)) {
              expected.push_back(page);
            }
          }
          ASSERT_EQ(pages, expected) << "page_tokens " << page_tokens << " anchor " << anchor << " recent " << recent
                                     << " old " << old_tokens << " new " << new_tokens;
          // Growing in two steps converts the same pages as growing in one.
          const int64_t middle = old_tokens + (new_tokens - old_tokens) / 2;
          std::vector<int64_t> first, second;
          ASSERT_TRUE(PagesToConvert(policy, page_tokens, old_tokens, middle, pins, &first).ok());
          ASSERT_TRUE(PagesToConvert(policy, page_tokens, middle, new_tokens, pins, &second).ok());
          first.insert(first.end(), second.begin(), second.end());
          ASSERT_EQ(first, expected);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 4 * 4 * 5 * 12);
}

TEST(RetentionPolicy, TheRecommendedPolicyAtThirtyTwoK) {
  RetentionPolicy policy;  // anchors 256, recent 1024
  std::vector<int64_t> pages;
  ASSERT_TRUE(PagesToConvert(policy, 64, 0, 32768, {}, &pages).ok());
  // Pages 0-3 hold the 256 anchor tokens, pages 496-511 the last 1024: 492 pages go to TQ3 (minimakv plan's count).
  ASSERT_EQ(pages.size(), 492u);
  EXPECT_EQ(pages.front(), 4);
  EXPECT_EQ(pages.back(), 495);
  EXPECT_EQ(StalePageEnd(policy, 64, 32768), 496);
  // One more token: no page leaves the window until 64 more have come.
  ASSERT_TRUE(PagesToConvert(policy, 64, 32768, 32769, {}, &pages).ok());
  EXPECT_TRUE(pages.empty());
  ASSERT_TRUE(PagesToConvert(policy, 64, 32768, 32832, {}, &pages).ok());
  EXPECT_EQ(pages, (std::vector<int64_t>{496}));
  policy.convert_stale_to_tq3 = false;
  ASSERT_TRUE(PagesToConvert(policy, 64, 0, 32768, {}, &pages).ok());
  EXPECT_TRUE(pages.empty());
}

TEST(RetentionPolicy, BadArgumentsAreErrorsNamingTheValue) {
  RetentionPolicy policy;
  std::vector<int64_t> pages{7};
  auto message = [&](int page_tokens, int64_t old_tokens, int64_t new_tokens) {
    const Status s = PagesToConvert(policy, page_tokens, old_tokens, new_tokens, {}, &pages);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  };
  EXPECT_NE(message(0, 0, 10).find("page_tokens 0"), std::string::npos);
  EXPECT_NE(message(kMaxPageTokens + 1, 0, 10).find("page_tokens 65537"), std::string::npos);
  EXPECT_NE(message(64, -1, 10).find("old -1"), std::string::npos);
  EXPECT_NE(message(64, 20, 10).find("old 20, new 10"), std::string::npos);
  policy.recent_tokens = -5;
  EXPECT_NE(message(64, 0, 10).find("recent -5"), std::string::npos);
  policy.recent_tokens = 0;
  EXPECT_NE(message(1, 0, int64_t(1) << 40).find("more than 67108864 in one call"), std::string::npos);
  EXPECT_EQ(pages, (std::vector<int64_t>{7}));  // untouched on error
  EXPECT_EQ(PagesToConvert(RetentionPolicy{}, 64, 0, 10, {}, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace minimakv
