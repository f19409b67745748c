#include "minimakv/retention_policy.h"

#include <string>

#include "minimakv/page_layout.h"

namespace minimakv {

int64_t StalePageEnd(const RetentionPolicy& policy, int page_tokens, int64_t num_tokens) {
  const int64_t outside = num_tokens - policy.recent_tokens;
  return outside <= 0 ? 0 : outside / page_tokens;
}

bool IsAnchorPage(const RetentionPolicy& policy, int page_tokens, int64_t page_index,
                  std::span<const TokenRange> pins) {
  const int64_t page_begin = page_index * page_tokens;
  const int64_t page_end = page_begin + page_tokens;
  if (page_begin < policy.anchor_tokens) return true;
  for (const TokenRange& pin : pins) {
    if (pin.begin_token < page_end && page_begin < pin.end_token) return true;
  }
  return false;
}

Status PagesToConvert(const RetentionPolicy& policy, int page_tokens, int64_t old_tokens, int64_t new_tokens,
                      std::span<const TokenRange> pins, std::vector<int64_t>* pages) {
  if (pages == nullptr) return Status::InvalidArgument("PagesToConvert: pages is null");
  if (page_tokens < 1 || page_tokens > kMaxPageTokens) {
    return Status::InvalidArgument("page_tokens " + std::to_string(page_tokens) + " outside [1, " +
                                   std::to_string(kMaxPageTokens) + "]");
  }
  if (old_tokens < 0 || new_tokens < old_tokens) {
    return Status::InvalidArgument("token counts old " + std::to_string(old_tokens) + ", new " +
                                   std::to_string(new_tokens) + ": need 0 <= old <= new");
  }
  if (policy.recent_tokens < 0 || policy.anchor_tokens < 0) {
    return Status::InvalidArgument("retention windows recent " + std::to_string(policy.recent_tokens) +
                                   ", anchor " + std::to_string(policy.anchor_tokens) + " must be >= 0");
  }
  const int64_t begin = StalePageEnd(policy, page_tokens, old_tokens);
  const int64_t end = StalePageEnd(policy, page_tokens, new_tokens);
  if (end - begin > kMaxPagesToConvert) {
    return Status::InvalidArgument("growth from " + std::to_string(old_tokens) + " to " + std::to_string(new_tokens) +
                                   " tokens would list " + std::to_string(end - begin) + " pages, more than " +
                                   std::to_string(kMaxPagesToConvert) + " in one call");
  }
  pages->clear();
  if (!policy.convert_stale_to_tq3) return Status::Ok();
  pages->reserve(size_t(end - begin));
  for (int64_t page = begin; page < end; ++page) {
    if (!IsAnchorPage(policy, page_tokens, page, pins)) pages->push_back(page);
  }
  return Status::Ok();
}

}  // namespace minimakv
