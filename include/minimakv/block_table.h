// BlockTable: for one (sequence, layer), the ordered list of physical pages holding its tokens.
// Logical page i holds tokens [i * page_tokens, min((i + 1) * page_tokens, num_tokens)); every page but the
// last is full. Each entry names its format, because pages of one sequence live in different pools
// (FP8 recent/anchor pages next to TQ3 stale pages).
#pragma once

#include <cstdint>
#include <vector>

#include "minimakv/kv_format.h"

namespace minimakv {

struct PageRef {
  KvFormat format = KvFormat::kFp8;
  int32_t page_id = -1;  // index into the pool of `format`
  friend bool operator==(const PageRef&, const PageRef&) = default;
};

struct BlockTable {
  std::vector<PageRef> pages;  // logical order; pages.size() == ceil(num_tokens / page_tokens)
  int64_t num_tokens = 0;

  // Valid tokens of logical page `index` (page_tokens for every page but a partly-filled last one).
  int ValidTokens(size_t index, int page_tokens) const {
    const int64_t begin = int64_t(index) * page_tokens;
    const int64_t left = num_tokens - begin;
    return left >= page_tokens ? page_tokens : int(left);
  }
  // Bytes of this table's entries: what KvAccounting::metadata_bytes counts.
  size_t metadata_bytes() const { return pages.size() * sizeof(PageRef); }
};

}  // namespace minimakv
