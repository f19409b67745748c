// PageLayout: where each byte of one KV page lives. A page holds K and V of every KV head of one layer for
// `page_tokens` consecutive tokens, in one format. Shared by the cache, the CPU kernels and the CUDA kernels.
//
// Sections, in order (each head's tokens contiguous, so a kernel for one KV head streams one block):
//   K codes   [kv_heads][page_tokens][CodeBytesPerVector]
//   V codes   [kv_heads][page_tokens][CodeBytesPerVector]
//   K scales  [kv_heads][page_tokens]   fp32 (FP8) or fp16 (TQ3); absent for BF16
//   V scales  [kv_heads][page_tokens]
//   padding   up to a multiple of kPageAlignBytes
// Code bytes per vector: BF16 2d (bf16 values), FP8 d (E4M3 codes), TQ3 3d/8 (3-bit nibble codes, tq3_codec.h).
#pragma once

#include <cstddef>

#include "minimakv/host_device.h"
#include "minimakv/kv_format.h"

namespace minimakv {

inline constexpr size_t kPageAlignBytes = 64;
// The most tokens a page may hold: every holder of pages (layouts, the cache, sessions, capture files) checks this.
inline constexpr int kMaxPageTokens = 65536;

struct PageLayout {
  KvFormat format = KvFormat::kBf16;
  int kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 0;

  MINIMAKV_HOST_DEVICE constexpr size_t code_bytes() const { return CodeBytesPerVector(format, head_dim); }
  MINIMAKV_HOST_DEVICE constexpr size_t scale_bytes() const { return ScaleBytesPerVector(format); }
  MINIMAKV_HOST_DEVICE constexpr size_t vectors() const { return size_t(kv_heads) * page_tokens; }

  // Byte offsets inside the page. head in [0, kv_heads), token in [0, page_tokens).
  MINIMAKV_HOST_DEVICE constexpr size_t k_codes_offset(int head, int token) const {
    return (size_t(head) * page_tokens + token) * code_bytes();
  }
  MINIMAKV_HOST_DEVICE constexpr size_t v_codes_offset(int head, int token) const {
    return vectors() * code_bytes() + k_codes_offset(head, token);
  }
  MINIMAKV_HOST_DEVICE constexpr size_t k_scale_offset(int head, int token) const {
    return 2 * vectors() * code_bytes() + (size_t(head) * page_tokens + token) * scale_bytes();
  }
  MINIMAKV_HOST_DEVICE constexpr size_t v_scale_offset(int head, int token) const {
    return 2 * vectors() * code_bytes() + vectors() * scale_bytes() + (size_t(head) * page_tokens + token) * scale_bytes();
  }
  // Payload (codes + scales) and the aligned page size the pool allocates.
  MINIMAKV_HOST_DEVICE constexpr size_t payload_bytes() const { return 2 * vectors() * (code_bytes() + scale_bytes()); }
  MINIMAKV_HOST_DEVICE constexpr size_t page_bytes() const {
    return (payload_bytes() + kPageAlignBytes - 1) / kPageAlignBytes * kPageAlignBytes;
  }
};

// InvalidArgument naming the bad field unless head_dim is supported and kv_heads, page_tokens are positive
// (page_tokens <= kMaxPageTokens).
Status CheckPageLayout(const PageLayout& layout);

}  // namespace minimakv
