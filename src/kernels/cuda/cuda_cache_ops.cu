// Append (K/V -> FP8 or BF16 pages through a slot mapping) and conversion (FP8 pages -> TQ3 pages) on the GPU.
// One warp per head vector; every floating-point step mirrors the CPU codec in the same order (see
// cuda_cache_ops.h), so the bytes are identical.
#include "minimakv/cuda_cache_ops.h"

#include <cmath>
#include <string>

#include "kernels/cuda/cuda_warp_rotation.cuh"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

using cuda_detail::kFullWarpMask;
using cuda_detail::kWarpSize;

constexpr int kWarpsPerBlock = 4;
constexpr int kThreadsPerBlock = kWarpsPerBlock * kWarpSize;

Status CudaError(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(error));
}

// ---------------------------------------------------------------------------------------------------------
// Append
struct AppendParams {
  const void* key;
  const void* value;
  const int64_t* slots;
  uint8_t* pages;
  int32_t* error_flag;
  PageLayout layout;
  int64_t num_slots;
  int num_tokens;
};

template <int kHeadDim, bool kBf16Input, KvFormat kFormat>
__global__ void __launch_bounds__(kThreadsPerBlock) AppendKernel(AppendParams p) {
  constexpr int kPerLane = kHeadDim / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t vector = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int kv_heads = p.layout.kv_heads;
  if (vector >= int64_t(p.num_tokens) * kv_heads * 2) return;
  const bool is_value = vector & 1;
  const int head = int((vector >> 1) % kv_heads);
  const int token = int((vector >> 1) / kv_heads);
  const int64_t slot = p.slots[token];
  if (slot < 0) return;  // padding row
  if (slot >= p.num_slots) {
    if (lane == 0) atomicCAS(p.error_flag, 0, token + 1);
    return;
  }
  const size_t input_offset = (size_t(token) * kv_heads + head) * kHeadDim;
  float x[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int i = lane + kWarpSize * k;
    if constexpr (kBf16Input) {
      const uint16_t* src = static_cast<const uint16_t*>(is_value ? p.value : p.key) + input_offset;
      x[k] = Bf16ToFloat(src[i]);
    } else {
      const float* src = static_cast<const float*>(is_value ? p.value : p.key) + input_offset;
      x[k] = src[i];
    }
  }
  bool finite = true;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) finite = finite && isfinite(x[k]);
  if (!__all_sync(kFullWarpMask, finite)) {
    if (lane == 0) atomicCAS(p.error_flag, 0, token + 1);
    return;  // nothing written for this vector
  }
  const int page = int(slot / p.layout.page_tokens);
  const int in_page = int(slot % p.layout.page_tokens);
  uint8_t* page_base = p.pages + size_t(page) * p.layout.page_bytes();
  const size_t codes_offset =
      is_value ? p.layout.v_codes_offset(head, in_page) : p.layout.k_codes_offset(head, in_page);
  if constexpr (kFormat == KvFormat::kBf16) {
    uint16_t* codes = reinterpret_cast<uint16_t*>(page_base + codes_offset);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) codes[lane + kWarpSize * k] = FloatToBf16(x[k]);
  } else {
    // Fp8EncodeVector: amax (max is order independent), scale = amax / 448, code = E4M3(x / scale).
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) amax = fmaxf(amax, fabsf(x[k]));
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      amax = fmaxf(amax, __shfl_xor_sync(kFullWarpMask, amax, offset));
    }
    uint8_t* codes = page_base + codes_offset;
    const size_t scale_offset =
        is_value ? p.layout.v_scale_offset(head, in_page) : p.layout.k_scale_offset(head, in_page);
    float* scale_out = reinterpret_cast<float*>(page_base + scale_offset);
    if (amax == 0.0f) {
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) codes[lane + kWarpSize * k] = 0;
      if (lane == 0) *scale_out = 0.0f;
      return;
    }
    const float scale = __fdiv_rn(amax, kE4m3MaxFinite);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) codes[lane + kWarpSize * k] = FloatToE4m3(__fdiv_rn(x[k], scale));
    if (lane == 0) *scale_out = scale;
  }
}

template <int kHeadDim>
Status LaunchAppend(const CudaAppendArgs& args, const AppendParams& params, cudaStream_t stream) {
  const int64_t vectors = int64_t(args.num_tokens) * args.layout.kv_heads * 2;
  const unsigned blocks = unsigned((vectors + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const bool bf16_in = args.dtype == CudaInputDtype::kBf16;
  if (args.layout.format == KvFormat::kFp8) {
    if (bf16_in) {
      AppendKernel<kHeadDim, true, KvFormat::kFp8><<<blocks, kThreadsPerBlock, 0, stream>>>(params);
    } else {
      AppendKernel<kHeadDim, false, KvFormat::kFp8><<<blocks, kThreadsPerBlock, 0, stream>>>(params);
    }
  } else {
    if (bf16_in) {
      AppendKernel<kHeadDim, true, KvFormat::kBf16><<<blocks, kThreadsPerBlock, 0, stream>>>(params);
    } else {
      AppendKernel<kHeadDim, false, KvFormat::kBf16><<<blocks, kThreadsPerBlock, 0, stream>>>(params);
    }
  }
  return CudaError(cudaGetLastError(), "append kernel launch");
}

// ---------------------------------------------------------------------------------------------------------
// Convert FP8 -> TQ3
struct ConvertParams {
  const uint8_t* fp8_pages;
  uint8_t* tq3_pages;
  const CudaConvertPair* pairs;
  int32_t* error_flag;
  PageLayout fp8_layout;
  PageLayout tq3_layout;
  int64_t fp8_num_pages;
  int64_t tq3_num_pages;
  CudaSignBits signs;
  float inv_sqrt_dim;  // HadamardRotation::inv_sqrt_dim()
  float sqrt_dim;      // float(sqrt(double(d))), the numerator Tq3EncodeVector uses
  int num_pairs;
};

template <int kHeadDim>
__global__ void __launch_bounds__(kThreadsPerBlock) ConvertKernel(ConvertParams p) {
  constexpr int kPerLane = kHeadDim / kWarpSize;  // also the number of 32-coordinate groups
  constexpr int kWords = 3 * kPerLane;            // code words of one vector (3 per group, tq3_codec.h)
  const int lane = threadIdx.x % kWarpSize;
  const int page_tokens = p.fp8_layout.page_tokens;
  const int kv_heads = p.fp8_layout.kv_heads;
  const int64_t vector = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (vector >= int64_t(p.num_pairs) * kv_heads * 2 * page_tokens) return;
  const int token = int(vector % page_tokens);
  int64_t rest = vector / page_tokens;
  const bool is_value = rest & 1;
  rest >>= 1;
  const int head = int(rest % kv_heads);
  const int pair_index = int(rest / kv_heads);
  const CudaConvertPair pair = p.pairs[pair_index];
  // The pairs are caller data in device memory: a page outside its pool or a token count outside [1, page_tokens]
  // rejects the pair (every warp of it returns here, so none of its vectors is written anywhere).
  if (pair.src_page < 0 || pair.src_page >= p.fp8_num_pages || pair.dst_page < 0 ||
      pair.dst_page >= p.tq3_num_pages || pair.tokens < 1 || pair.tokens > page_tokens) {
    if (lane == 0) atomicCAS(p.error_flag, 0, pair_index + 1);
    return;
  }

  uint8_t* dst_page = p.tq3_pages + size_t(pair.dst_page) * p.tq3_layout.page_bytes();
  uint32_t* dst_words = reinterpret_cast<uint32_t*>(
      dst_page + (is_value ? p.tq3_layout.v_codes_offset(head, token) : p.tq3_layout.k_codes_offset(head, token)));
  uint16_t* dst_scale = reinterpret_cast<uint16_t*>(
      dst_page + (is_value ? p.tq3_layout.v_scale_offset(head, token) : p.tq3_layout.k_scale_offset(head, token)));
  auto write_zero = [&]() {
    if (lane < kWords) dst_words[lane] = 0u;
    if (lane == 0) *dst_scale = 0;
  };
  if (token >= pair.tokens) {
    write_zero();
    return;
  }
  const uint8_t* src_page = p.fp8_pages + size_t(pair.src_page) * p.fp8_layout.page_bytes();
  const uint8_t* codes =
      src_page + (is_value ? p.fp8_layout.v_codes_offset(head, token) : p.fp8_layout.k_codes_offset(head, token));
  const float fp8_scale = *reinterpret_cast<const float*>(
      src_page + (is_value ? p.fp8_layout.v_scale_offset(head, token) : p.fp8_layout.k_scale_offset(head, token)));

  // Fp8DecodeVector, then HadamardRotation::Forward: x * sign, butterflies, * inv_sqrt_dim.
  float y[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int i = lane + kWarpSize * k;
    const float x = __fmul_rn(E4m3ToFloat(codes[i]), fp8_scale);
    y[k] = __fmul_rn(x, cuda_detail::SignOf(p.signs, i));
  }
  cuda_detail::WarpFwht<kHeadDim>(y, lane);
  float work[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    y[k] = __fmul_rn(y[k], p.inv_sqrt_dim);
    work[k] = __fmul_rn(y[k], y[k]);
  }
  const float norm = __fsqrt_rn(cuda_detail::WarpTreeSum<kHeadDim>(work));
  if (norm == 0.0f) {
    write_zero();
    return;
  }
  const float unit_scale = __fdiv_rn(p.sqrt_dim, norm);
  int index[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    index[k] = Tq3Quantize(__fmul_rn(y[k], unit_scale));
    const float c = Tq3Centroid(index[k]);
    work[k] = __fmul_rn(c, c);
  }
  const float scale = __fdiv_rn(norm, __fsqrt_rn(cuda_detail::WarpTreeSum<kHeadDim>(work)));
  if (!(scale <= kFp16MaxFinite)) {
    if (lane == 0) atomicCAS(p.error_flag, 0, pair_index + 1);
    write_zero();
    return;
  }
  // Group k = coordinates 32 k + lane, packed as tq3_codec.h lays it out: lane c < 24 puts its index into nibble
  // c % 8 of word c / 8, lane c >= 24 bit w of its index into bit 3 of nibble c - 24 of word w. The bits of different
  // lanes are disjoint, so word w is the OR over the warp of the lanes' parts (index & mask[w]) << shift[w] (one warp
  // reduction per word); lane 3 k + w keeps word w of group k and the warp stores the vector's words at once.
  constexpr int kWordsPerGroup = 3;
  constexpr int kNibblesPerWord = 8;
  constexpr int kFirstSpill = kWordsPerGroup * kNibblesPerWord;  // coordinates 24 .. 31 of a group
  constexpr int kNibbleBits = 4;
  constexpr int kSpillBit = 3;         // bit of a nibble that carries a spill coordinate's bit
  constexpr uint32_t kIndexMask = 7u;  // 3-bit index
  uint32_t part_mask[kWordsPerGroup];
  int part_shift[kWordsPerGroup];
#pragma unroll
  for (int w = 0; w < kWordsPerGroup; ++w) {
    const bool spill = lane >= kFirstSpill;
    part_mask[w] = spill ? 1u << w : (lane / kNibblesPerWord == w ? kIndexMask : 0u);
    part_shift[w] = spill ? kNibbleBits * (lane - kFirstSpill) + kSpillBit - w : kNibbleBits * (lane % kNibblesPerWord);
  }
  uint32_t my_word = 0u;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
#pragma unroll
    for (int w = 0; w < kWordsPerGroup; ++w) {
      const uint32_t word = __reduce_or_sync(kFullWarpMask, (uint32_t(index[k]) & part_mask[w]) << part_shift[w]);
      if (lane == kWordsPerGroup * k + w) my_word = word;
    }
  }
  if (lane < kWords) dst_words[lane] = my_word;
  if (lane == 0) *dst_scale = FloatToFp16(scale);
}

template <int kHeadDim>
Status LaunchConvert(const CudaConvertArgs& args, const ConvertParams& params, cudaStream_t stream) {
  const int64_t vectors = int64_t(args.num_pairs) * args.fp8_layout.kv_heads * 2 * args.fp8_layout.page_tokens;
  const unsigned blocks = unsigned((vectors + kWarpsPerBlock - 1) / kWarpsPerBlock);
  ConvertKernel<kHeadDim><<<blocks, kThreadsPerBlock, 0, stream>>>(params);
  return CudaError(cudaGetLastError(), "convert kernel launch");
}

}  // namespace

CudaSignBits MakeCudaSignBits(uint64_t seed, int head_dim) {
  CudaSignBits bits{};
  for (int i = 0; i < head_dim && i < 256; ++i) {
    if (HadamardSign(seed, i) < 0.0f) bits.words[i / 32] |= 1u << (i % 32);
  }
  return bits;
}

Status CudaAppend(const CudaAppendArgs& args, cudaStream_t stream) {
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(args.layout));
  if (args.layout.format != KvFormat::kFp8 && args.layout.format != KvFormat::kBf16) {
    return Status::InvalidArgument("CudaAppend writes fp8 or bf16 pages, not " +
                                   std::string(KvFormatName(args.layout.format)));
  }
  if (args.num_tokens < 0) return Status::InvalidArgument("num_tokens " + std::to_string(args.num_tokens) + " < 0");
  // The kernel's slot bound is num_pages * page_tokens (int64): keep it far from overflow (2^40 pages; page_tokens
  // <= 65536 by CheckPageLayout).
  constexpr int64_t kMaxAppendPages = int64_t(1) << 40;
  if (args.num_pages < 0 || int64_t(args.num_pages) > kMaxAppendPages) {
    return Status::InvalidArgument("num_pages " + std::to_string(args.num_pages) + " outside [0, 2^40]");
  }
  if (args.d_error_flag == nullptr) return Status::InvalidArgument("d_error_flag is null");
  MINIMAKV_RETURN_IF_ERROR(CudaError(cudaMemsetAsync(args.d_error_flag, 0, sizeof(int32_t), stream), "memset"));
  if (args.num_tokens == 0) return Status::Ok();
  if (args.d_key == nullptr || args.d_value == nullptr || args.d_slot_mapping == nullptr || args.d_pages == nullptr) {
    return Status::InvalidArgument("CudaAppend: null key, value, slot mapping or pages pointer");
  }
  AppendParams params{args.d_key,          args.d_value, args.d_slot_mapping,
                      args.d_pages,        args.d_error_flag, args.layout,
                      args.num_pages * args.layout.page_tokens, args.num_tokens};
  switch (args.layout.head_dim) {
    case 64: return LaunchAppend<64>(args, params, stream);
    case 128: return LaunchAppend<128>(args, params, stream);
    case 256: return LaunchAppend<256>(args, params, stream);
  }
  return Status::InvalidArgument("head_dim " + std::to_string(args.layout.head_dim) + " unsupported");
}

Status CudaReadAppendError(const int32_t* d_error_flag, cudaStream_t stream) {
  int32_t flag = 0;
  MINIMAKV_RETURN_IF_ERROR(
      CudaError(cudaMemcpyAsync(&flag, d_error_flag, sizeof flag, cudaMemcpyDeviceToHost, stream), "copy flag"));
  MINIMAKV_RETURN_IF_ERROR(CudaError(cudaStreamSynchronize(stream), "synchronize"));
  if (flag == 0) return Status::Ok();
  return Status::InvalidArgument("row / pair " + std::to_string(flag - 1) +
                                 " was rejected (non-finite input, slot or page out of range, token count outside "
                                 "[1, page_tokens], or fp16 scale overflow); its vectors were not written");
}

Status CudaConvertFp8ToTq3(const CudaConvertArgs& args, cudaStream_t stream) {
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(args.fp8_layout));
  MINIMAKV_RETURN_IF_ERROR(CheckPageLayout(args.tq3_layout));
  if (args.fp8_layout.format != KvFormat::kFp8 || args.tq3_layout.format != KvFormat::kTq3) {
    return Status::InvalidArgument("CudaConvertFp8ToTq3 needs an fp8 source and a tq3 destination layout");
  }
  if (args.fp8_layout.kv_heads != args.tq3_layout.kv_heads || args.fp8_layout.head_dim != args.tq3_layout.head_dim ||
      args.fp8_layout.page_tokens != args.tq3_layout.page_tokens) {
    return Status::InvalidArgument("fp8 and tq3 layouts differ in kv_heads, head_dim or page_tokens");
  }
  if (args.d_error_flag == nullptr) return Status::InvalidArgument("d_error_flag is null");
  if (args.num_pairs < 0) return Status::InvalidArgument("num_pairs " + std::to_string(args.num_pairs) + " < 0");
  if (args.num_pairs > 0 && (args.fp8_num_pages <= 0 || args.tq3_num_pages <= 0)) {
    return Status::InvalidArgument("fp8_num_pages " + std::to_string(args.fp8_num_pages) + " / tq3_num_pages " +
                                   std::to_string(args.tq3_num_pages) + ": both pools' sizes must be positive");
  }
  if (args.num_pairs > 0 && (args.d_fp8_pages == nullptr || args.d_tq3_pages == nullptr || args.d_pairs == nullptr)) {
    return Status::InvalidArgument("CudaConvertFp8ToTq3: null fp8 pages, tq3 pages or pairs pointer");
  }
  MINIMAKV_RETURN_IF_ERROR(CudaError(cudaMemsetAsync(args.d_error_flag, 0, sizeof(int32_t), stream), "memset"));
  if (args.num_pairs == 0) return Status::Ok();
  const int d = args.fp8_layout.head_dim;
  ConvertParams params{};
  params.fp8_pages = args.d_fp8_pages;
  params.tq3_pages = args.d_tq3_pages;
  params.pairs = args.d_pairs;
  params.error_flag = args.d_error_flag;
  params.fp8_layout = args.fp8_layout;
  params.tq3_layout = args.tq3_layout;
  params.fp8_num_pages = args.fp8_num_pages;
  params.tq3_num_pages = args.tq3_num_pages;
  params.signs = MakeCudaSignBits(args.rotation_seed, d);
  params.inv_sqrt_dim = float(1.0 / std::sqrt(double(d)));  // as HadamardRotation::Create
  params.sqrt_dim = float(std::sqrt(double(d)));            // as Tq3EncodeVector
  params.num_pairs = args.num_pairs;
  switch (d) {
    case 64: return LaunchConvert<64>(args, params, stream);
    case 128: return LaunchConvert<128>(args, params, stream);
    case 256: return LaunchConvert<256>(args, params, stream);
  }
  return Status::InvalidArgument("head_dim " + std::to_string(d) + " unsupported");
}

}  // namespace minimakv
