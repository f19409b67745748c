// CUDA cache operations: append new tokens into FP8 (or BF16) pages, and convert FP8 pages to TQ3.
// Both produce exactly the bytes of the CPU codecs (fp8_codec.h, bf16_codec.h, tq3_codec.h): same operation
// order, IEEE division and square root, no FMA contraction (minimakv_cuda is built with --fmad=false).
// All pointers named d_* are device memory; every call is asynchronous on `stream` and only launches kernels
// (and memsets), so it can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "minimakv/page_layout.h"
#include "minimakv/status.h"

namespace minimakv {

enum class CudaInputDtype : uint8_t { kFloat32 = 0, kBf16 = 1 };

// Where one append writes. slot = page_id * page_tokens + token_in_page; a negative slot is a padding row that is
// skipped (the explicit sentinel, as vLLM's slot_mapping).
struct CudaAppendArgs {
  const void* d_key = nullptr;          // [num_tokens][kv_heads][head_dim], dtype below
  const void* d_value = nullptr;        // [num_tokens][kv_heads][head_dim]
  CudaInputDtype dtype = CudaInputDtype::kFloat32;
  int num_tokens = 0;
  const int64_t* d_slot_mapping = nullptr;  // [num_tokens]
  PageLayout layout;                    // format kFp8 or kBf16
  uint8_t* d_pages = nullptr;           // pool base; page p at d_pages + p * layout.page_bytes()
  int64_t num_pages = 0;                // pool size: slots must be < num_pages * page_tokens
  // [1] int32, zeroed by CudaAppend before its kernel. After the stream is synchronized, read it with
  // CudaReadAppendError: 0 = all rows written; otherwise 1 + a bad row (non-finite K/V or slot out of range; with
  // several, whichever the device flagged first, not necessarily the lowest), whose vectors were NOT written (no
  // silent garbage).
  int32_t* d_error_flag = nullptr;
};

// InvalidArgument (naming the field) for a bad shape or format; launches the append kernel otherwise.
Status CudaAppend(const CudaAppendArgs& args, cudaStream_t stream);

// Copies an append or convert error flag to the host (synchronizes the stream) and turns it into a Status.
Status CudaReadAppendError(const int32_t* d_error_flag, cudaStream_t stream);

// The Hadamard signs of a seed as bits (bit i of word i/32 set = coordinate i negated), what the kernels read.
struct CudaSignBits {
  uint32_t words[8];  // 256 coordinates at most
};
CudaSignBits MakeCudaSignBits(uint64_t seed, int head_dim);

// One conversion: FP8 page src_page (its first `tokens` tokens are valid) -> TQ3 page dst_page. Tokens beyond
// `tokens` get zero codes and scale 0 (a zero vector), so the whole destination page is defined.
struct CudaConvertPair {
  int32_t src_page = 0;
  int32_t dst_page = 0;
  int32_t tokens = 0;
};

struct CudaConvertArgs {
  PageLayout fp8_layout;                // format kFp8
  PageLayout tq3_layout;                // format kTq3, same kv_heads, head_dim, page_tokens
  const uint8_t* d_fp8_pages = nullptr;
  uint8_t* d_tq3_pages = nullptr;
  const CudaConvertPair* d_pairs = nullptr;  // [num_pairs]
  int num_pairs = 0;
  // The pools' sizes in pages (session 16; required when num_pairs > 0). The pairs are device memory, so the kernel
  // checks them: a pair whose src_page or dst_page lies outside its pool, or whose tokens lie outside
  // [1, page_tokens], is rejected (error flag = 1 + its index; with several bad pairs, whichever the device flagged
  // first, not necessarily the lowest index) and nothing of it is written.
  int64_t fp8_num_pages = 0;
  int64_t tq3_num_pages = 0;
  uint64_t rotation_seed = 0;           // HadamardRotation seed of the TQ3 pool
  // [1] int32 zeroed by CudaConvertFp8ToTq3: 0, or 1 + index of a rejected pair (out of range, above) or of a pair
  // holding a vector whose TQ3 scale overflows fp16 (the CPU codec's InvalidArgument; that vector is written as zero
  // codes with scale 0).
  // Read it with CudaReadAppendError (same convention).
  int32_t* d_error_flag = nullptr;
};

Status CudaConvertFp8ToTq3(const CudaConvertArgs& args, cudaStream_t stream);

}  // namespace minimakv
