// The C ABI of include/minimakv/c_api.h over the CUDA API (cuda_cache_ops.h, cuda_attention.h) and the fp64
// reference. Each entry point validates what the C++ API leaves to C++ callers (null handles and arrays, counts),
// converts Status to an int code plus a thread-local message, and catches every exception (bad_alloc from a plan's
// vectors) so that none crosses the C boundary.
#include "minimakv/c_api.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "minimakv/cuda_attention.h"
#include "minimakv/cuda_cache_ops.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/page_layout.h"
#include "minimakv/paged_kv_view.h"
#include "minimakv/reference_attention.h"
#include "minimakv/retention_policy.h"
#include "minimakv/status.h"

using minimakv::Status;

struct minimakv_cuda_plan {
  minimakv::CudaDecodePlan plan;
  int32_t view_page_tokens[minimakv::kCudaMaxViews] = {};  // the plan keeps them private; runs rebuild the views
};

// The C constants are the C++ enum values, and d_pairs is read as CudaConvertPair[].
static_assert(sizeof(minimakv::CudaConvertPair) == 3 * sizeof(int32_t), "d_pairs is read as int32 [n][3]");
static_assert(int(minimakv::KvFormat::kFp8) == MINIMAKV_FORMAT_FP8 &&
              int(minimakv::KvFormat::kTq3) == MINIMAKV_FORMAT_TQ3 &&
              int(minimakv::KvFormat::kBf16) == MINIMAKV_FORMAT_BF16);
static_assert(int(minimakv::StatusCode::kInternal) == MINIMAKV_INTERNAL &&
              int(minimakv::StatusCode::kInvalidArgument) == MINIMAKV_INVALID_ARGUMENT &&
              int(minimakv::StatusCode::kUnsupported) == MINIMAKV_UNSUPPORTED);

namespace {

thread_local std::string g_last_error;

// When a message cannot be stored (out of memory): a short fixed one, which fits the string's inline buffer
// (no allocation).
void SetOutOfMemoryError() noexcept {
  g_last_error.clear();
  g_last_error.append("out of memory");
}

int Report(const Status& status) noexcept {
  if (status.ok()) {
    g_last_error.clear();
    return MINIMAKV_OK;
  }
  try {
    g_last_error = status.message();
  } catch (...) {
    SetOutOfMemoryError();
  }
  return int(status.code());
}

// The status of an exception caught at the boundary. Building its message can throw too (bad_alloc), and that
// must not leave the catch handler either.
int ReportException(const char* what) noexcept {
  try {
    return Report(Status::Internal(std::string("exception: ") + what));
  } catch (...) {
    SetOutOfMemoryError();
    return MINIMAKV_INTERNAL;
  }
}

// Runs body (returning Status) and turns its result, or any exception, into the C status.
template <typename Body>
int Guarded(Body&& body) noexcept {
  try {
    return Report(body());
  } catch (const std::exception& e) {
    return ReportException(e.what());
  } catch (...) {
    return ReportException("unknown");
  }
}

Status FormatFromInt(int32_t value, const char* what, minimakv::KvFormat* out) {
  if (value != MINIMAKV_FORMAT_BF16 && value != MINIMAKV_FORMAT_FP8 && value != MINIMAKV_FORMAT_TQ3) {
    return Status::InvalidArgument(std::string(what) + " " + std::to_string(value) +
                                   " is not a format (0 bf16, 1 fp8, 2 tq3)");
  }
  *out = minimakv::KvFormat(value);
  return Status::Ok();
}

Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(error));
}

// The host-side checks shared by plan_create and the reference: view count, per-view arrays present, layouts
// valid. Fills layouts[v].
Status CheckViews(int32_t num_seqs, int32_t kv_heads, int32_t head_dim, int32_t num_views, const int32_t* view_formats,
                  const int32_t* view_page_tokens, const int32_t* const* page_indptr,
                  const int32_t* const* last_page_tokens, minimakv::PageLayout* layouts) {
  if (num_seqs < 0) return Status::InvalidArgument("num_seqs " + std::to_string(num_seqs) + " < 0");
  if (num_views < 0 || num_views > minimakv::kCudaMaxViews) {
    return Status::InvalidArgument("num_views " + std::to_string(num_views) + " outside [0, 3]");
  }
  if (num_views > 0 && (view_formats == nullptr || view_page_tokens == nullptr || page_indptr == nullptr ||
                        last_page_tokens == nullptr)) {
    return Status::InvalidArgument("null view array (formats, page_tokens, page_indptr or last_page_tokens)");
  }
  for (int v = 0; v < num_views; ++v) {
    const std::string name = "view " + std::to_string(v);
    minimakv::KvFormat format;
    MINIMAKV_RETURN_IF_ERROR(FormatFromInt(view_formats[v], (name + " format").c_str(), &format));
    layouts[v] = minimakv::PageLayout{format, kv_heads, head_dim, view_page_tokens[v]};
    const Status layout_status = minimakv::CheckPageLayout(layouts[v]);
    if (!layout_status.ok()) return Status::InvalidArgument(name + ": " + layout_status.message());
    if (page_indptr[v] == nullptr || last_page_tokens[v] == nullptr) {
      return Status::InvalidArgument(name + ": null page_indptr or last_page_tokens");
    }
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

const char* minimakv_last_error(void) { return g_last_error.c_str(); }

int minimakv_api_version(int32_t* out_version) {
  return Guarded([&] {
    if (out_version == nullptr) return Status::InvalidArgument("out_version is null");
    *out_version = MINIMAKV_C_API_VERSION;
    return Status::Ok();
  });
}

int minimakv_default_rotation_seed(uint64_t* out_seed) {
  return Guarded([&] {
    if (out_seed == nullptr) return Status::InvalidArgument("out_seed is null");
    *out_seed = minimakv::HadamardRotation::kDefaultSeed;
    return Status::Ok();
  });
}

int minimakv_page_bytes(int32_t format, int32_t kv_heads, int32_t head_dim, int32_t page_tokens,
                        int64_t* out_page_bytes) {
  return Guarded([&] {
    if (out_page_bytes == nullptr) return Status::InvalidArgument("out_page_bytes is null");
    minimakv::KvFormat kv_format;
    MINIMAKV_RETURN_IF_ERROR(FormatFromInt(format, "format", &kv_format));
    const minimakv::PageLayout layout{kv_format, kv_heads, head_dim, page_tokens};
    MINIMAKV_RETURN_IF_ERROR(minimakv::CheckPageLayout(layout));
    *out_page_bytes = int64_t(layout.page_bytes());
    return Status::Ok();
  });
}

int minimakv_pages_to_convert(int32_t anchor_tokens, int32_t recent_tokens, int32_t page_tokens, int64_t old_tokens,
                              int64_t new_tokens, const int64_t* pin_ranges, int32_t num_pins, int64_t* out_pages,
                              int64_t capacity, int64_t* out_count) {
  return Guarded([&] {
    if (out_count == nullptr) return Status::InvalidArgument("out_count is null");
    if (num_pins < 0 || (num_pins > 0 && pin_ranges == nullptr)) {
      return Status::InvalidArgument("num_pins " + std::to_string(num_pins) + " with pin_ranges " +
                                     (pin_ranges == nullptr ? "null" : "set"));
    }
    if (capacity < 0 || (capacity > 0 && out_pages == nullptr)) {
      return Status::InvalidArgument("capacity " + std::to_string(capacity) + " with out_pages " +
                                     (out_pages == nullptr ? "null" : "set"));
    }
    std::vector<minimakv::TokenRange> pins(static_cast<size_t>(num_pins));
    for (int32_t i = 0; i < num_pins; ++i) pins[size_t(i)] = {pin_ranges[2 * i], pin_ranges[2 * i + 1]};
    minimakv::RetentionPolicy policy;
    policy.anchor_tokens = anchor_tokens;
    policy.recent_tokens = recent_tokens;
    std::vector<int64_t> pages;
    MINIMAKV_RETURN_IF_ERROR(minimakv::PagesToConvert(policy, page_tokens, old_tokens, new_tokens, pins, &pages));
    *out_count = int64_t(pages.size());
    if (int64_t(pages.size()) > capacity) {
      return Status::ResourceExhausted(std::to_string(pages.size()) + " pages to convert exceed capacity " +
                                       std::to_string(capacity));
    }
    std::copy(pages.begin(), pages.end(), out_pages);
    return Status::Ok();
  });
}

int minimakv_cuda_append(int32_t format, int32_t kv_heads, int32_t head_dim, int32_t page_tokens, const void* d_key,
                         const void* d_value, int32_t input_dtype, int32_t num_tokens, const int64_t* d_slot_mapping,
                         void* d_pages, int64_t num_pages, int32_t* d_error_flag, void* stream) {
  return Guarded([&] {
    minimakv::CudaAppendArgs args;
    MINIMAKV_RETURN_IF_ERROR(FormatFromInt(format, "format", &args.layout.format));
    if (input_dtype != MINIMAKV_DTYPE_FLOAT32 && input_dtype != MINIMAKV_DTYPE_BFLOAT16) {
      return Status::InvalidArgument("input_dtype " + std::to_string(input_dtype) + " is not 0 (float32) or 1 (bf16)");
    }
    // num_pages * page_tokens (<= 65536) is the kernel's slot bound: it must not overflow int64.
    if (num_pages < 0 || num_pages > (int64_t(1) << 40)) {
      return Status::InvalidArgument("num_pages " + std::to_string(num_pages) + " outside [0, 2^40]");
    }
    args.layout.kv_heads = kv_heads;
    args.layout.head_dim = head_dim;
    args.layout.page_tokens = page_tokens;
    args.d_key = d_key;
    args.d_value = d_value;
    args.dtype = minimakv::CudaInputDtype(input_dtype);
    args.num_tokens = num_tokens;
    args.d_slot_mapping = d_slot_mapping;
    args.d_pages = static_cast<uint8_t*>(d_pages);
    args.num_pages = num_pages;
    args.d_error_flag = d_error_flag;
    return minimakv::CudaAppend(args, static_cast<cudaStream_t>(stream));  // checks layout, pointers, count
  });
}

int minimakv_cuda_read_error_flag(const int32_t* d_error_flag, void* stream) {
  return Guarded([&] {
    if (d_error_flag == nullptr) return Status::InvalidArgument("d_error_flag is null");
    return minimakv::CudaReadAppendError(d_error_flag, static_cast<cudaStream_t>(stream));
  });
}

int minimakv_cuda_convert_fp8_to_tq3(int32_t kv_heads, int32_t head_dim, int32_t page_tokens, const void* d_fp8_pages,
                                     void* d_tq3_pages, int64_t fp8_num_pages, int64_t tq3_num_pages,
                                     const int32_t* d_pairs, int32_t num_pairs,
                                     uint64_t rotation_seed, int32_t* d_error_flag, void* stream) {
  return Guarded([&] {
    if (num_pairs < 0) return Status::InvalidArgument("num_pairs " + std::to_string(num_pairs) + " < 0");
    if (num_pairs > 0 && (d_fp8_pages == nullptr || d_tq3_pages == nullptr || d_pairs == nullptr)) {
      return Status::InvalidArgument("null fp8 pages, tq3 pages or pairs pointer");
    }
    minimakv::CudaConvertArgs args;
    args.fp8_layout = {minimakv::KvFormat::kFp8, kv_heads, head_dim, page_tokens};
    args.tq3_layout = {minimakv::KvFormat::kTq3, kv_heads, head_dim, page_tokens};
    args.d_fp8_pages = static_cast<const uint8_t*>(d_fp8_pages);
    args.d_tq3_pages = static_cast<uint8_t*>(d_tq3_pages);
    args.d_pairs = reinterpret_cast<const minimakv::CudaConvertPair*>(d_pairs);
    args.num_pairs = num_pairs;
    args.fp8_num_pages = fp8_num_pages;
    args.tq3_num_pages = tq3_num_pages;
    args.rotation_seed = rotation_seed;
    args.d_error_flag = d_error_flag;
    return minimakv::CudaConvertFp8ToTq3(args, static_cast<cudaStream_t>(stream));
  });
}

int minimakv_cuda_plan_create(int32_t num_seqs, int32_t query_tokens, int32_t num_q_heads, int32_t kv_heads,
                              int32_t head_dim,
                              float sm_scale, uint64_t rotation_seed, int32_t num_views, const int32_t* view_formats,
                              const int32_t* view_page_tokens, const int32_t* const* host_page_indptr,
                              const int32_t* const* host_last_page_tokens, minimakv_cuda_plan** out_plan) {
  return Guarded([&] {
    if (out_plan == nullptr) return Status::InvalidArgument("out_plan is null");
    *out_plan = nullptr;
    minimakv::PageLayout layouts[minimakv::kCudaMaxViews];
    MINIMAKV_RETURN_IF_ERROR(CheckViews(num_seqs, kv_heads, head_dim, num_views, view_formats, view_page_tokens,
                                        host_page_indptr, host_last_page_tokens, layouts));
    minimakv::CudaViewLengths lengths[minimakv::kCudaMaxViews];
    for (int v = 0; v < num_views; ++v) {
      lengths[v] = {layouts[v].format, layouts[v].page_tokens, host_page_indptr[v], host_last_page_tokens[v]};
    }
    int device = 0;
    int sm_count = 0;
    MINIMAKV_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
    MINIMAKV_RETURN_IF_ERROR(
        CudaStatus(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), "SM count"));
    minimakv::CudaDecodeShape shape;
    shape.num_seqs = num_seqs;
    shape.num_q_heads = num_q_heads;
    shape.kv_heads = kv_heads;
    shape.head_dim = head_dim;
    shape.sm_scale = sm_scale;
    shape.rotation_seed = rotation_seed;
    shape.query_tokens = query_tokens;  // validated by Create (>= 1, rows per KV head <= 64)
    auto handle = std::make_unique<minimakv_cuda_plan>();
    MINIMAKV_RETURN_IF_ERROR(minimakv::CudaDecodePlan::Create(shape, lengths, num_views, sm_count, &handle->plan));
    for (int v = 0; v < num_views; ++v) handle->view_page_tokens[v] = view_page_tokens[v];
    *out_plan = handle.release();
    return Status::Ok();
  });
}

int minimakv_cuda_plan_workspace_bytes(const minimakv_cuda_plan* plan, int64_t* out_bytes) {
  return Guarded([&] {
    if (plan == nullptr || out_bytes == nullptr) return Status::InvalidArgument("null plan or out_bytes");
    *out_bytes = int64_t(plan->plan.workspace_bytes());
    return Status::Ok();
  });
}

int minimakv_cuda_plan_total_items(const minimakv_cuda_plan* plan, int32_t* out_items) {
  return Guarded([&] {
    if (plan == nullptr || out_items == nullptr) return Status::InvalidArgument("null plan or out_items");
    *out_items = plan->plan.total_items();
    return Status::Ok();
  });
}

int minimakv_cuda_plan_upload(const minimakv_cuda_plan* plan, void* d_workspace, void* stream) {
  return Guarded([&] {
    if (plan == nullptr) return Status::InvalidArgument("plan is null");
    return plan->plan.Upload(d_workspace, static_cast<cudaStream_t>(stream));
  });
}

int minimakv_cuda_decode_run(const minimakv_cuda_plan* plan, int32_t num_views, const void* const* d_view_pages,
                             const int32_t* const* d_view_page_indptr, const int32_t* const* d_view_page_ids,
                             const int32_t* const* d_view_last_page_tokens, const float* d_q, void* d_workspace,
                             float* d_out, float* d_lse_log2, void* stream) {
  return Guarded([&] {
    if (plan == nullptr) return Status::InvalidArgument("plan is null");
    const minimakv::CudaDecodePlan& p = plan->plan;
    if (num_views != p.num_views()) {
      return Status::InvalidArgument("num_views " + std::to_string(num_views) + " differs from the plan's " +
                                     std::to_string(p.num_views()));
    }
    if (num_views > 0 && (d_view_pages == nullptr || d_view_page_indptr == nullptr || d_view_page_ids == nullptr ||
                          d_view_last_page_tokens == nullptr)) {
      return Status::InvalidArgument("null view array (pages, page_indptr, page_ids or last_page_tokens)");
    }
    const minimakv::CudaDecodeShape& shape = p.shape();
    minimakv::PagedKvView views[minimakv::kCudaMaxViews];
    for (int v = 0; v < num_views; ++v) {
      // Part of the PagedKvView contract even though the kernels take their work lists from the workspace.
      if (shape.num_seqs > 0 && (d_view_page_indptr[v] == nullptr || d_view_last_page_tokens[v] == nullptr)) {
        return Status::InvalidArgument("view " + std::to_string(v) + ": null page_indptr or last_page_tokens");
      }
      views[v].layout = {p.view_format(v), shape.kv_heads, shape.head_dim, plan->view_page_tokens[v]};
      views[v].pages = static_cast<const uint8_t*>(d_view_pages[v]);
      views[v].num_seqs = shape.num_seqs;
      views[v].page_indptr = d_view_page_indptr[v];
      views[v].page_ids = d_view_page_ids[v];
      views[v].last_page_tokens = d_view_last_page_tokens[v];
    }
    return minimakv::CudaDecodeRun(p, views, num_views, d_q, d_workspace, minimakv::PartialStatesOut{d_out, d_lse_log2},
                                   static_cast<cudaStream_t>(stream));
  });
}

int minimakv_cuda_plan_destroy(minimakv_cuda_plan* plan) {
  return Guarded([&] {
    delete plan;
    return Status::Ok();
  });
}

int minimakv_reference_decode_host(int32_t num_seqs, int32_t query_tokens, int32_t num_q_heads, int32_t kv_heads,
                                   int32_t head_dim,
                                   float sm_scale, uint64_t rotation_seed, int32_t num_views,
                                   const int32_t* view_formats, const int32_t* view_page_tokens,
                                   const int64_t* view_num_pages, const void* const* host_pages,
                                   const int32_t* const* host_page_indptr, const int32_t* const* host_page_ids,
                                   const int32_t* const* host_last_page_tokens, const float* host_q, float* host_out,
                                   float* host_lse_log2) {
  return Guarded([&] {
    minimakv::PageLayout layouts[minimakv::kCudaMaxViews];
    MINIMAKV_RETURN_IF_ERROR(CheckViews(num_seqs, kv_heads, head_dim, num_views, view_formats, view_page_tokens,
                                        host_page_indptr, host_last_page_tokens, layouts));
    if (num_views == 0) return Status::InvalidArgument("the reference needs at least one view");
    if (query_tokens < 1 || query_tokens > (1 << 20)) {
      return Status::InvalidArgument("query_tokens " + std::to_string(query_tokens) + " outside [1, 2^20]");
    }
    // q_indptr is int32: num_seqs * query_tokens (the query rows' count) must fit it.
    if (int64_t(num_seqs) * query_tokens > INT32_MAX) {
      return Status::InvalidArgument("num_seqs " + std::to_string(num_seqs) + " x query_tokens " +
                                     std::to_string(query_tokens) + " query tokens exceed 2^31 - 1");
    }
    if (view_num_pages == nullptr || host_pages == nullptr || host_page_ids == nullptr) {
      return Status::InvalidArgument("null view array (num_pages, pages or page_ids)");
    }
    if (num_seqs > 0 && (host_q == nullptr || host_out == nullptr || host_lse_log2 == nullptr)) {
      return Status::InvalidArgument("null q, out or lse_log2 pointer");
    }
    if (!(sm_scale > 0.0f) || !std::isfinite(sm_scale)) {
      return Status::InvalidArgument("sm_scale " + std::to_string(sm_scale) + " must be positive and finite");
    }
    // The reference reads pages on the host: every CSR entry and page id must be inside the arrays it was given.
    minimakv::PagedKvView views[minimakv::kCudaMaxViews];
    for (int v = 0; v < num_views; ++v) {
      const std::string name = "view " + std::to_string(v);
      const int32_t* indptr = host_page_indptr[v];
      const int32_t* last = host_last_page_tokens[v];
      if (indptr[0] != 0) return Status::InvalidArgument(name + ": page_indptr[0] = " + std::to_string(indptr[0]));
      for (int s = 0; s < num_seqs; ++s) {
        if (indptr[s + 1] < indptr[s]) {
          return Status::InvalidArgument(name + ": page_indptr decreases at seq " + std::to_string(s));
        }
        if (indptr[s + 1] > indptr[s] && (last[s] < 1 || last[s] > view_page_tokens[v])) {
          return Status::InvalidArgument(name + ": last_page_tokens[" + std::to_string(s) + "] = " +
                                         std::to_string(last[s]) + " outside [1, page_tokens]");
        }
      }
      const int32_t total_pages = indptr[num_seqs];
      if (total_pages > 0 && (host_pages[v] == nullptr || host_page_ids[v] == nullptr)) {
        return Status::InvalidArgument(name + ": null pages or page_ids");
      }
      for (int32_t i = 0; i < total_pages; ++i) {
        if (host_page_ids[v][i] < 0 || host_page_ids[v][i] >= view_num_pages[v]) {
          return Status::InvalidArgument(name + ": page_ids[" + std::to_string(i) + "] = " +
                                         std::to_string(host_page_ids[v][i]) + " outside the pool of " +
                                         std::to_string(view_num_pages[v]) + " pages");
        }
      }
      views[v] = {layouts[v], static_cast<const uint8_t*>(host_pages[v]), num_seqs, indptr, host_page_ids[v], last};
    }
    minimakv::HadamardRotation rotation;
    MINIMAKV_RETURN_IF_ERROR(minimakv::HadamardRotation::Create(head_dim, rotation_seed, &rotation));
    std::vector<int32_t> q_indptr(size_t(num_seqs) + 1);
    for (int s = 0; s <= num_seqs; ++s) q_indptr[size_t(s)] = s * query_tokens;  // uniform, as the CUDA plan
    const minimakv::AttentionQueries queries{host_q, q_indptr.data(), num_seqs, num_q_heads, sm_scale};
    std::vector<double> out, lse_log2;
    const std::span<const minimakv::PagedKvView> view_span(views, size_t(num_views));
    MINIMAKV_RETURN_IF_ERROR(minimakv::ReferenceAttention(view_span, queries, &rotation, &out, &lse_log2));
    for (size_t i = 0; i < out.size(); ++i) host_out[i] = float(out[i]);
    for (size_t i = 0; i < lse_log2.size(); ++i) host_lse_log2[i] = float(lse_log2[i]);
    return Status::Ok();
  });
}

}  // extern "C"
