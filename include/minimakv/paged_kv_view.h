// PagedKvView: what a format's attention kernel reads: the pages of ONE format of ONE layer for a batch of
// sequences, in CSR form. Decode attention is permutation-invariant over past tokens, so a sequence's pages of
// one format can be listed in any order; only the last listed page of a sequence may be partly filled.
// The cache builds these views (PagedCache::BuildFormatView); kernels never see block tables.
#pragma once

#include <cstddef>
#include <cstdint>

#include "minimakv/page_layout.h"

namespace minimakv {

struct PagedKvView {
  PageLayout layout;
  const uint8_t* pages = nullptr;           // pool base: page p starts at pages + p * layout.page_bytes()
  int num_seqs = 0;
  const int32_t* page_indptr = nullptr;     // [num_seqs + 1]: seq s owns page_ids[page_indptr[s], page_indptr[s+1])
  const int32_t* page_ids = nullptr;        // [page_indptr[num_seqs]] physical page ids in the pool
  const int32_t* last_page_tokens = nullptr;  // [num_seqs] valid tokens of seq s's last listed page, 1..page_tokens
                                              // (ignored for a sequence with no pages in this format)
};

// Tokens of sequence s in this view.
inline int64_t ViewSeqTokens(const PagedKvView& view, int s) {
  const int64_t pages = view.page_indptr[s + 1] - view.page_indptr[s];
  if (pages == 0) return 0;
  return (pages - 1) * view.layout.page_tokens + view.last_page_tokens[s];
}

}  // namespace minimakv
