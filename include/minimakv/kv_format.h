// KvFormat: the storage formats a KV page can have, and the head dimensions they support.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "minimakv/host_device.h"
#include "minimakv/status.h"

namespace minimakv {

enum class KvFormat : uint8_t {
  kBf16 = 0,  // dense control: 2 bytes per value, no scale
  kFp8 = 1,   // E4M3 codes, one fp32 scale per (token, head)
  kTq3 = 2,   // TurboQuant 3-bit: bit-packed centroid indices, one fp16 scale per (token, head)
};
inline constexpr int kNumKvFormats = 3;

std::string_view KvFormatName(KvFormat format);
// Parses "bf16", "fp8" or "tq3".
Status ParseKvFormat(std::string_view name, KvFormat* format);

// Head dimensions every codec and kernel supports (CPU and CUDA: cuda_attention.h). The
// Hadamard rotation needs a power of two; the kernels are specialized for these sizes (SmolLM/Llama 64 and 128,
// Qwen3.6 256).
inline constexpr int kSupportedHeadDims[] = {64, 128, 256};
MINIMAKV_HOST_DEVICE constexpr bool IsSupportedHeadDim(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}
// InvalidArgument naming `head_dim` unless it is 64, 128 or 256.
Status CheckHeadDim(int head_dim);

// Bytes of codes for one head vector (one of K or V, one token, one head).
MINIMAKV_HOST_DEVICE constexpr size_t CodeBytesPerVector(KvFormat format, int head_dim) {
  return format == KvFormat::kBf16  ? size_t(2) * head_dim
         : format == KvFormat::kFp8 ? size_t(head_dim)
                                    : size_t(3) * head_dim / 8;  // 3 bits per coordinate
}
// Bytes of scale for one head vector.
MINIMAKV_HOST_DEVICE constexpr size_t ScaleBytesPerVector(KvFormat format) {
  return format == KvFormat::kBf16 ? 0 : format == KvFormat::kFp8 ? 4 : 2;
}
MINIMAKV_HOST_DEVICE constexpr size_t BytesPerVector(KvFormat format, int head_dim) {
  return CodeBytesPerVector(format, head_dim) + ScaleBytesPerVector(format);
}

}  // namespace minimakv
