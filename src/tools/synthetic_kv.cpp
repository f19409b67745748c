#include "tools/synthetic_kv.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {
constexpr size_t kHugePageBytes = size_t(2) << 20;
}  // namespace

PagedKvView SyntheticPool::View() const {
  PagedKvView view;
  view.layout = layout;
  view.pages = pages.get();
  view.num_seqs = num_seqs();
  view.page_indptr = page_indptr.data();
  view.page_ids = page_ids.data();
  view.last_page_tokens = last_page_tokens.data();
  return view;
}

namespace {

Status EncodeVector(const PageLayout& layout, const HadamardRotation* rotation, const float* x, uint8_t* codes,
                    uint8_t* scale) {
  switch (layout.format) {
    case KvFormat::kBf16: {
      uint16_t bf16[256];
      MINIMAKV_RETURN_IF_ERROR(Bf16EncodeVector(x, layout.head_dim, bf16));
      std::memcpy(codes, bf16, layout.code_bytes());
      return Status::Ok();
    }
    case KvFormat::kFp8: {
      float s;
      MINIMAKV_RETURN_IF_ERROR(Fp8EncodeVector(x, layout.head_dim, codes, &s));
      std::memcpy(scale, &s, sizeof s);
      return Status::Ok();
    }
    case KvFormat::kTq3: {
      uint16_t s;
      MINIMAKV_RETURN_IF_ERROR(Tq3EncodeVector(*rotation, x, codes, &s));
      std::memcpy(scale, &s, sizeof s);
      return Status::Ok();
    }
  }
  return Status::Internal("unknown format");
}

}  // namespace

Status BuildSyntheticPool(const PageLayout& layout, const HadamardRotation* rotation,
                          const std::vector<std::vector<TokenRange>>& ranges, const KvSource& source,
                          uint64_t page_order_seed, SyntheticPool* pool) {
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(layout));
  if (layout.format == KvFormat::kTq3 && (rotation == nullptr || rotation->head_dim() != layout.head_dim)) {
    return Status::InvalidArgument("a TQ3 pool needs a rotation of head_dim " + std::to_string(layout.head_dim));
  }
  const int64_t page_tokens = layout.page_tokens;
  SyntheticPool built;
  built.layout = layout;
  built.page_indptr.push_back(0);
  for (size_t s = 0; s < ranges.size(); ++s) {
    int64_t tokens = 0;
    for (size_t i = 0; i < ranges[s].size(); ++i) {
      const TokenRange& range = ranges[s][i];
      if (range.begin_token < 0 || range.end_token < range.begin_token) {
        return Status::InvalidArgument("sequence " + std::to_string(s) + " range " + std::to_string(i) + " [" +
                                       std::to_string(range.begin_token) + ", " + std::to_string(range.end_token) + ") is invalid");
      }
      const int64_t length = range.end_token - range.begin_token;
      if (i + 1 < ranges[s].size() && length % page_tokens != 0) {
        return Status::InvalidArgument("sequence " + std::to_string(s) + " range " + std::to_string(i) + " holds " +
                                       std::to_string(length) + " tokens, not a multiple of page_tokens " +
                                       std::to_string(page_tokens) + " (only the last range may end mid-page)");
      }
      tokens += length;
    }
    const int64_t pages = (tokens + page_tokens - 1) / page_tokens;
    // Page ids and page_indptr are int32 (PagedKvView): checked before any allocation sized by the page count.
    if (pages > int64_t(INT32_MAX) - int64_t(built.num_pages)) {
      return Status::InvalidArgument("sequence " + std::to_string(s) + " brings the pool to " +
                                     std::to_string(int64_t(built.num_pages) + pages) + " pages of " +
                                     std::to_string(page_tokens) + " tokens, more than int32 page ids address");
    }
    built.num_pages += size_t(pages);
    built.page_indptr.push_back(int32_t(built.num_pages));
    built.last_page_tokens.push_back(tokens == 0 ? 0 : int32_t(tokens - (pages - 1) * page_tokens));
    built.seq_tokens.push_back(tokens);
  }
  built.page_ids.resize(built.num_pages);
  std::iota(built.page_ids.begin(), built.page_ids.end(), 0);
  if (page_order_seed != 0) {
    std::mt19937_64 rng(page_order_seed);
    std::shuffle(built.page_ids.begin(), built.page_ids.end(), rng);
  }
  // Pools are aligned to and padded to 2 MiB and advised to use transparent huge pages, as a serving engine's
  // pool would be: with 4 KiB pages, scattered page ids cost a TLB miss per KV page and the benchmark would
  // measure page walks rather than the kernels.
  const size_t bytes = (std::max<size_t>(built.pool_bytes(), kPageAlignBytes) + kHugePageBytes - 1) / kHugePageBytes *
                       kHugePageBytes;
  built.pages.reset(static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, bytes)));
  if (built.pages == nullptr) {
    return Status::ResourceExhausted("cannot allocate " + std::to_string(bytes) + " bytes for a synthetic pool");
  }
#if defined(MADV_HUGEPAGE)
  madvise(built.pages.get(), bytes, MADV_HUGEPAGE);  // advisory: failure only costs speed
#endif
  std::memset(built.pages.get(), 0, bytes);

  const int d = layout.head_dim;
  std::vector<float> k(size_t(layout.kv_heads) * d);
  std::vector<float> v(size_t(layout.kv_heads) * d);
  for (size_t s = 0; s < ranges.size(); ++s) {
    int64_t slot = 0;  // token slot within the sequence's listed pages
    for (const TokenRange& range : ranges[s]) {
      for (int64_t token = range.begin_token; token < range.end_token; ++token, ++slot) {
        source(int(s), token, k.data(), v.data());
        const int32_t page_id = built.page_ids[size_t(built.page_indptr[s] + slot / page_tokens)];
        uint8_t* page = built.pages.get() + size_t(page_id) * layout.page_bytes();
        const int t = int(slot % page_tokens);
        for (int h = 0; h < layout.kv_heads; ++h) {
          MINIMAKV_RETURN_IF_ERROR(EncodeVector(layout, rotation, k.data() + size_t(h) * d,
                                                page + layout.k_codes_offset(h, t), page + layout.k_scale_offset(h, t)));
          MINIMAKV_RETURN_IF_ERROR(EncodeVector(layout, rotation, v.data() + size_t(h) * d,
                                                page + layout.v_codes_offset(h, t), page + layout.v_scale_offset(h, t)));
        }
      }
    }
  }
  *pool = std::move(built);
  return Status::Ok();
}

void SplitMinimaTiers(int64_t context, int page_tokens, int anchor_tokens, int recent_tokens,
                      std::vector<TokenRange>* fp8_ranges, std::vector<TokenRange>* tq3_ranges) {
  fp8_ranges->clear();
  tq3_ranges->clear();
  if (context <= 0) return;
  const int64_t anchor_end =
      std::min<int64_t>(context, (int64_t(std::max(anchor_tokens, 0)) + page_tokens - 1) / page_tokens * page_tokens);
  const int64_t recent_start = std::max<int64_t>(
      anchor_end, std::max<int64_t>(0, context - std::max(recent_tokens, 0)) / page_tokens * page_tokens);
  if (recent_start <= anchor_end) {  // the anchors and the recent window cover everything
    fp8_ranges->push_back({0, context});
    return;
  }
  if (anchor_end > 0) fp8_ranges->push_back({0, anchor_end});
  fp8_ranges->push_back({recent_start, context});
  tq3_ranges->push_back({anchor_end, recent_start});
}

GaussianSource::GaussianSource(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {
  if (state_ == 0) state_ = 1;
}

uint64_t GaussianSource::NextBits() {
  // xorshift64* (Vigna 2016).
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545F4914F6CDD1Dull;
}

float GaussianSource::Next() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  constexpr double kTwoPi = 6.283185307179586;
  constexpr double kInv2Pow53 = 1.0 / 9007199254740992.0;
  const double u1 = (double(NextBits() >> 11) + 1.0) * kInv2Pow53;  // (0, 1]
  const double u2 = double(NextBits() >> 11) * kInv2Pow53;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  spare_ = float(radius * std::sin(kTwoPi * u2));
  has_spare_ = true;
  return float(radius * std::cos(kTwoPi * u2));
}

void GaussianSource::Fill(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = Next();
}

}  // namespace minimakv
