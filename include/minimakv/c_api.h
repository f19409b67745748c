/* C ABI over the CUDA path (library minimakv_cuda_capi, libminimakv_cuda_capi.so, built with -DMINIMAKV_CUDA=ON):
 * for callers that cannot use C++, e.g. Python through ctypes (python/minimakv_torch.py, docs/python.md).
 *
 * Plain C types only. Device pointers and the cudaStream_t are passed as void* (a null stream is the legacy
 * default stream). Every function returns an int status: MINIMAKV_OK (0) or the library's StatusCode (status.h),
 * and no C++ exception crosses this boundary. After a failure, minimakv_last_error() gives the Status message, which
 * names the bad value. A caller's mistake (null pointer, bad shape, unsupported format) is an error, never an
 * abort. What cannot be checked without reading device memory is documented per function (page ids, slots).
 *
 * The same steps as tests/install_consumer/cuda_example.cpp:
 *   minimakv_cuda_append               K/V rows -> FP8 pages through a slot mapping (cuda_cache_ops.h CudaAppend)
 *   minimakv_cuda_convert_fp8_to_tq3   FP8 pages -> TQ3 pages (CudaConvertFp8ToTq3)
 *   minimakv_cuda_plan_create          decode plan from the shape and the views' host lengths (CudaDecodePlan)
 *   minimakv_cuda_plan_upload          work lists into the caller's device workspace
 *   minimakv_cuda_decode_run           partial kernels per format + merge (CudaDecodeRun; graph-capturable)
 *   minimakv_cuda_plan_destroy
 * and, for checks, minimakv_reference_decode_host: the fp64 reference attention (reference_attention.h) on host
 * copies of the pages. minimakv_pages_to_convert (host only) tells which pages the retention policy converts after
 * an append (retention_policy.h PagesToConvert), so an engine with device pools follows the same policy as
 * PagedCache.
 */
#ifndef MINIMAKV_C_API_H_
#define MINIMAKV_C_API_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MINIMAKV_C_EXPORT __attribute__((visibility("default")))
#else
#define MINIMAKV_C_EXPORT
#endif

/* Bumped when a signature below changes; the Python wrapper refuses a library of another version. */
/* 2 (session 16): query_tokens in plan_create and reference_decode_host; pool sizes in convert.
 * 3 (session 19): minimakv_pages_to_convert. */
#define MINIMAKV_C_API_VERSION 3

/* Status codes: the values of minimakv::StatusCode. */
#define MINIMAKV_OK 0
#define MINIMAKV_INVALID_ARGUMENT 1
#define MINIMAKV_RESOURCE_EXHAUSTED 2
#define MINIMAKV_NOT_FOUND 3
#define MINIMAKV_CORRUPTION 4
#define MINIMAKV_UNSUPPORTED 5
#define MINIMAKV_INTERNAL 6

/* Page formats: the values of minimakv::KvFormat. */
#define MINIMAKV_FORMAT_BF16 0
#define MINIMAKV_FORMAT_FP8 1
#define MINIMAKV_FORMAT_TQ3 2

/* Input dtypes of minimakv_cuda_append (CudaInputDtype). */
#define MINIMAKV_DTYPE_FLOAT32 0
#define MINIMAKV_DTYPE_BFLOAT16 1

/* The message of this thread's last failed call ("" after a successful one). Valid until this thread's next call. */
MINIMAKV_C_EXPORT const char* minimakv_last_error(void);

/* *out_version = MINIMAKV_C_API_VERSION of the library. */
MINIMAKV_C_EXPORT int minimakv_api_version(int32_t* out_version);

/* *out_seed = HadamardRotation::kDefaultSeed (the rotation seed a cache uses unless told otherwise). */
MINIMAKV_C_EXPORT int minimakv_default_rotation_seed(uint64_t* out_seed);

/* Bytes of one page (page_layout.h: K codes, V codes, K scales, V scales, padded to 64 bytes). A pool of n pages
 * is n * page_bytes bytes; page p starts at p * page_bytes. format: MINIMAKV_FORMAT_*; head_dim 64, 128 or 256. */
MINIMAKV_C_EXPORT int minimakv_page_bytes(int32_t format, int32_t kv_heads, int32_t head_dim, int32_t page_tokens,
                                          int64_t* out_page_bytes);

/* The pages of one sequence (indices in it, increasing) that the retention policy converts FP8 -> TQ3 when one
 * layer grows from old_tokens to new_tokens tokens (retention_policy.h PagesToConvert): the full pages that left
 * the recent window (the last recent_tokens tokens) with this growth, except those holding one of the first
 * anchor_tokens tokens or a token of a pinned range. old_tokens = 0: every stale page of a new_tokens sequence.
 *   pin_ranges   int64 [num_pins][2] (begin_token, end_token) pairs; may be null when num_pins = 0
 *   out_pages    int64 [capacity]; (new_tokens - old_tokens) / page_tokens + 1 entries always suffice
 *   *out_count   the number of pages. When they exceed capacity: MINIMAKV_RESOURCE_EXHAUSTED, *out_count set, and
 *                nothing written to out_pages. */
MINIMAKV_C_EXPORT int minimakv_pages_to_convert(int32_t anchor_tokens, int32_t recent_tokens, int32_t page_tokens,
                                                int64_t old_tokens, int64_t new_tokens, const int64_t* pin_ranges,
                                                int32_t num_pins, int64_t* out_pages, int64_t capacity,
                                                int64_t* out_count);

/* Appends num_tokens rows of K and V into pages of `format` (FP8 or BF16) on `stream` (asynchronous).
 *   d_key, d_value   device [num_tokens][kv_heads][head_dim], input_dtype MINIMAKV_DTYPE_*
 *   d_slot_mapping   device int64 [num_tokens]: slot = page_id * page_tokens + token_in_page; negative = skip row
 *   d_pages          device pool of num_pages pages (0 .. 2^40)
 *   d_error_flag     device int32 [1], zeroed here. Rows with a slot >= num_pages * page_tokens or a non-finite
 *                    value are not written; minimakv_cuda_read_error_flag reports the first one. */
MINIMAKV_C_EXPORT int minimakv_cuda_append(int32_t format, int32_t kv_heads, int32_t head_dim, int32_t page_tokens,
                                           const void* d_key, const void* d_value, int32_t input_dtype,
                                           int32_t num_tokens, const int64_t* d_slot_mapping, void* d_pages,
                                           int64_t num_pages, int32_t* d_error_flag, void* stream);

/* Synchronizes `stream`, reads an append or convert error flag: MINIMAKV_OK, or an error naming the first bad row
 * (append) or pair (convert). */
MINIMAKV_C_EXPORT int minimakv_cuda_read_error_flag(const int32_t* d_error_flag, void* stream);

/* Converts FP8 pages to TQ3 pages on `stream` (asynchronous); both pools share kv_heads, head_dim, page_tokens.
 *   d_pairs  device int32 [num_pairs][3]: (fp8 source page, tq3 destination page, valid tokens of the source).
 *            Checked on the device against fp8_num_pages / tq3_num_pages (the pools' sizes in pages) and
 *            [1, page_tokens]: a bad pair is not converted and the error flag names a bad pair (with several,
 *            whichever the device flagged first, not necessarily the lowest index).
 *   rotation_seed  the TQ3 pool's Hadamard seed (minimakv_default_rotation_seed), the same at decode time. */
MINIMAKV_C_EXPORT int minimakv_cuda_convert_fp8_to_tq3(int32_t kv_heads, int32_t head_dim, int32_t page_tokens,
                                                       const void* d_fp8_pages, void* d_tq3_pages,
                                                       int64_t fp8_num_pages, int64_t tq3_num_pages,
                                                       const int32_t* d_pairs, int32_t num_pairs,
                                                       uint64_t rotation_seed, int32_t* d_error_flag, void* stream);

/* A decode plan (opaque). One thread at a time may use it. */
typedef struct minimakv_cuda_plan minimakv_cuda_plan;

/* Plans one decode step (query_tokens >= 1 query tokens per sequence, every one attending to all cached tokens of
 * its sequence: 1 for plain decode, more for speculative decoding's verification) on the host for the CURRENT CUDA
 * device. query_tokens x (num_q_heads / kv_heads), the query rows per KV head, must be at most 64 (Unsupported).
 * View v (at most 3, one per format) has format view_formats[v], page_tokens view_page_tokens[v] (a multiple of
 * 16) and the host arrays host_page_indptr[v] [num_seqs + 1] and host_last_page_tokens[v] [num_seqs] (the CSR
 * lengths of paged_kv_view.h). The arrays are read during this call only. */
MINIMAKV_C_EXPORT int minimakv_cuda_plan_create(int32_t num_seqs, int32_t query_tokens, int32_t num_q_heads,
                                                int32_t kv_heads,
                                                int32_t head_dim, float sm_scale, uint64_t rotation_seed,
                                                int32_t num_views, const int32_t* view_formats,
                                                const int32_t* view_page_tokens,
                                                const int32_t* const* host_page_indptr,
                                                const int32_t* const* host_last_page_tokens,
                                                minimakv_cuda_plan** out_plan);

/* Device workspace bytes the plan needs (allocated by the caller, any alignment of cudaMalloc / torch). */
MINIMAKV_C_EXPORT int minimakv_cuda_plan_workspace_bytes(const minimakv_cuda_plan* plan, int64_t* out_bytes);

/* Partial-state items (CTAs' outputs) of the plan, for information. */
MINIMAKV_C_EXPORT int minimakv_cuda_plan_total_items(const minimakv_cuda_plan* plan, int32_t* out_items);

/* Copies the plan's work lists into d_workspace on `stream`. Keep the plan alive until the stream has passed the
 * copy. Once per plan and workspace; runs may then repeat (or be captured in a CUDA graph). A run on another stream
 * must be ordered after this copy, and runs sharing one workspace after each other, by the caller (events). */
MINIMAKV_C_EXPORT int minimakv_cuda_plan_upload(const minimakv_cuda_plan* plan, void* d_workspace, void* stream);

/* Runs the decode step on `stream` (asynchronous). Per view v (same order, formats and lengths as at plan time):
 * d_view_pages[v] (pool base), d_view_page_indptr[v], d_view_page_ids[v], d_view_last_page_tokens[v], all device
 * memory; page ids are NOT range-checked on the device.
 *   d_q         device float32 [num_seqs * query_tokens][num_q_heads][head_dim] (sequence s: rows s * query_tokens ..)
 *   d_out       device float32 [num_seqs * query_tokens][num_q_heads][head_dim]
 *   d_lse_log2  device float32 [num_seqs * query_tokens][num_q_heads], base-2 LSE of the scaled scores (-inf: no
 *               cached token) */
MINIMAKV_C_EXPORT int minimakv_cuda_decode_run(const minimakv_cuda_plan* plan, int32_t num_views,
                                               const void* const* d_view_pages,
                                               const int32_t* const* d_view_page_indptr,
                                               const int32_t* const* d_view_page_ids,
                                               const int32_t* const* d_view_last_page_tokens, const float* d_q,
                                               void* d_workspace, float* d_out, float* d_lse_log2, void* stream);

/* Frees the plan (null is fine). */
MINIMAKV_C_EXPORT int minimakv_cuda_plan_destroy(minimakv_cuda_plan* plan);

/* fp64 reference attention (reference_attention.h: decodes every page with the codecs, TQ3 back to the original
 * domain) over HOST copies of the views, rounded to float32 on output. For checks, not speed.
 * Same view arrays as the plan plus host_pages[v] (pool of view_num_pages[v] pages) and host_page_ids[v]; page
 * ids are range-checked. host_q, host_out [num_seqs * query_tokens][num_q_heads][head_dim], host_lse_log2
 * [num_seqs * query_tokens][num_q_heads]; query_tokens in [1, 2^20] and num_seqs * query_tokens < 2^31. */
MINIMAKV_C_EXPORT int minimakv_reference_decode_host(int32_t num_seqs, int32_t query_tokens, int32_t num_q_heads,
                                                     int32_t kv_heads,
                                                     int32_t head_dim, float sm_scale, uint64_t rotation_seed,
                                                     int32_t num_views, const int32_t* view_formats,
                                                     const int32_t* view_page_tokens, const int64_t* view_num_pages,
                                                     const void* const* host_pages,
                                                     const int32_t* const* host_page_indptr,
                                                     const int32_t* const* host_page_ids,
                                                     const int32_t* const* host_last_page_tokens,
                                                     const float* host_q, float* host_out, float* host_lse_log2);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* MINIMAKV_C_API_H_ */
