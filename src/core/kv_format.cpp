#include "minimakv/kv_format.h"

namespace minimakv {

std::string_view KvFormatName(KvFormat format) {
  switch (format) {
    case KvFormat::kBf16: return "bf16";
    case KvFormat::kFp8: return "fp8";
    case KvFormat::kTq3: return "tq3";
  }
  return "unknown";
}

Status ParseKvFormat(std::string_view name, KvFormat* format) {
  for (KvFormat f : {KvFormat::kBf16, KvFormat::kFp8, KvFormat::kTq3}) {
    if (name == KvFormatName(f)) {
      *format = f;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("unknown KV format '" + std::string(name) + "' (expected bf16, fp8 or tq3)");
}

Status CheckHeadDim(int head_dim) {
  if (IsSupportedHeadDim(head_dim)) return Status::Ok();
  return Status::InvalidArgument("head_dim " + std::to_string(head_dim) +
                                 " is not supported (the Hadamard rotation and kernels take 64, 128 or 256)");
}

}  // namespace minimakv

#include "minimakv/page_layout.h"

namespace minimakv {

Status CheckPageLayout(const PageLayout& layout) {
  MINIMAKV_RETURN_IF_ERROR(CheckHeadDim(layout.head_dim));
  if (layout.kv_heads < 1 || layout.kv_heads > 256) {
    return Status::InvalidArgument("kv_heads " + std::to_string(layout.kv_heads) + " must be in [1, 256]");
  }
  if (layout.page_tokens < 1 || layout.page_tokens > kMaxPageTokens) {
    return Status::InvalidArgument("page_tokens " + std::to_string(layout.page_tokens) + " must be in [1, " +
                                   std::to_string(kMaxPageTokens) + "]");
  }
  return Status::Ok();
}

}  // namespace minimakv
