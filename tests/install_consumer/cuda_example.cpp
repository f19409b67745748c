// The GPU path end to end through the INSTALLED package (minimakv::minimakv_cuda), as a serving engine would call
// it for one layer: append K/V of new tokens into FP8 pages (CudaAppend), convert pages that left the recent window
// to TQ3 (CudaConvertFp8ToTq3), plan the decode step on the host, upload the plan, run it (partial kernels per
// format + merge), and check the output against the fp64 reference over the same pages copied back to the host.
// .ci/run compiles and links it (no GPU there); scripts/gpu_check_and_bench.sh runs it on the GPU machine.
// Exit status 0 only when every call succeeds and the output matches (relative L2 error <= 1e-3).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "minimakv/cuda_attention.h"
#include "minimakv/cuda_cache_ops.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/reference_attention.h"
#include "minimakv/retention_policy.h"

namespace {

void Check(const minimakv::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "cuda_example: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}
void CheckCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "cuda_example: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}
template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  T* device = nullptr;
  CheckCuda(cudaMalloc(&device, host.size() * sizeof(T)), "cudaMalloc");
  CheckCuda(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  return device;
}

}  // namespace

int main() {
  using namespace minimakv;
  // One Llama-3-8B layer (32 query / 8 KV heads, head_dim 128), pages of 64 tokens, two sequences of 1000 and 300
  // cached tokens. The retention policy (anchors 64, recent 256 tokens) keeps sequence 0's page 0 (anchor) and its
  // last 5 pages FP8; pages 1-10 go to TQ3 (sequence 1 is all recent).
  constexpr int kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageTokens = 64;
  constexpr int kSeqTokens[2] = {1000, 300};
  constexpr int kFp8Pages = 32, kTq3Pages = 16;
  constexpr uint64_t kSeed = HadamardRotation::kDefaultSeed;
  const PageLayout fp8{KvFormat::kFp8, kKvHeads, kHeadDim, kPageTokens};
  const PageLayout tq3{KvFormat::kTq3, kKvHeads, kHeadDim, kPageTokens};

  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "cuda_example: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  CheckCuda(cudaStreamCreate(&stream), "stream");
  uint8_t *d_fp8 = nullptr, *d_tq3 = nullptr;
  CheckCuda(cudaMalloc(&d_fp8, fp8.page_bytes() * kFp8Pages), "fp8 pool");
  CheckCuda(cudaMalloc(&d_tq3, tq3.page_bytes() * kTq3Pages), "tq3 pool");
  int32_t* d_flag = nullptr;
  CheckCuda(cudaMalloc(&d_flag, sizeof(int32_t)), "error flag");

  // 1. Append: sequence 0 owns FP8 pages 0-15, sequence 1 pages 16-20; slot = page * page_tokens + token.
  const int first_page[2] = {0, 16};
  std::mt19937 rng(7);
  std::normal_distribution<float> gauss;
  for (int s = 0; s < 2; ++s) {
    const int n = kSeqTokens[s];
    std::vector<float> k(size_t(n) * kKvHeads * kHeadDim), v(k.size());
    for (float& x : k) x = gauss(rng);
    for (float& x : v) x = gauss(rng);
    std::vector<int64_t> slots(n);
    for (int t = 0; t < n; ++t) slots[t] = int64_t(first_page[s] + t / kPageTokens) * kPageTokens + t % kPageTokens;
    float* d_k = DeviceCopy(k);
    float* d_v = DeviceCopy(v);
    int64_t* d_slots = DeviceCopy(slots);
    CudaAppendArgs append;
    append.d_key = d_k, append.d_value = d_v, append.dtype = CudaInputDtype::kFloat32, append.num_tokens = n;
    append.d_slot_mapping = d_slots, append.layout = fp8, append.d_pages = d_fp8, append.num_pages = kFp8Pages;
    append.d_error_flag = d_flag;
    Check(CudaAppend(append, stream), "append");
    Check(CudaReadAppendError(d_flag, stream), "append rows");  // synchronizes: the inputs may be freed now
    CheckCuda(cudaFree(d_k), "free keys");
    CheckCuda(cudaFree(d_v), "free values");
    CheckCuda(cudaFree(d_slots), "free slots");
  }

  // 2. Convert the pages the policy says left the recent window (PagesToConvert, as the host cache would) into
  // TQ3 pages 0, 1, ...: for sequence 0, its pages 1-10.
  RetentionPolicy policy;
  policy.anchor_tokens = 64;
  policy.recent_tokens = 256;
  std::vector<CudaConvertPair> pairs;
  for (int s = 0; s < 2; ++s) {
    std::vector<int64_t> stale;
    Check(PagesToConvert(policy, kPageTokens, 0, kSeqTokens[s], {}, &stale), "pages to convert");
    for (int64_t p : stale) pairs.push_back({first_page[s] + int32_t(p), int32_t(pairs.size()), kPageTokens});
  }
  if (pairs.size() != 10 || pairs.front().src_page != 1 || pairs.back().src_page != 10) {
    std::fprintf(stderr, "cuda_example: the policy converts %zu pages, expected sequence 0's pages 1-10\n",
                 pairs.size());
    return 1;
  }
  CudaConvertPair* d_pairs = DeviceCopy(pairs);
  CudaConvertArgs convert;
  convert.fp8_layout = fp8, convert.tq3_layout = tq3, convert.d_fp8_pages = d_fp8, convert.d_tq3_pages = d_tq3;
  convert.d_pairs = d_pairs, convert.num_pairs = int(pairs.size()), convert.rotation_seed = kSeed;
  convert.fp8_num_pages = kFp8Pages, convert.tq3_num_pages = kTq3Pages;
  convert.d_error_flag = d_flag;
  Check(CudaConvertFp8ToTq3(convert, stream), "convert");
  Check(CudaReadAppendError(d_flag, stream), "convert pages");
  // (A real cache now publishes the TQ3 pages in its block table and only then frees FP8 pages 1-10.)

  // 3. The step's views: per format, CSR page lists per sequence (host copies for the plan, device copies to run).
  const std::vector<int32_t> fp8_indptr = {0, 6, 11}, fp8_ids = {0, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  const std::vector<int32_t> fp8_last = {kSeqTokens[0] - 15 * kPageTokens, kSeqTokens[1] - 4 * kPageTokens};
  const std::vector<int32_t> tq3_indptr = {0, 10, 10}, tq3_ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> tq3_last = {kPageTokens, kPageTokens};
  const CudaViewLengths lengths[2] = {{KvFormat::kFp8, kPageTokens, fp8_indptr.data(), fp8_last.data()},
                                      {KvFormat::kTq3, kPageTokens, tq3_indptr.data(), tq3_last.data()}};
  PagedKvView views[2];
  views[0] = {fp8, d_fp8, 2, DeviceCopy(fp8_indptr), DeviceCopy(fp8_ids), DeviceCopy(fp8_last)};
  views[1] = {tq3, d_tq3, 2, DeviceCopy(tq3_indptr), DeviceCopy(tq3_ids), DeviceCopy(tq3_last)};

  // 4. Plan on the host, upload once, run (this part is what a CUDA graph would capture and replay).
  int sm_count = 0;
  CheckCuda(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), "SM count");
  const CudaDecodeShape shape{2, kQHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(float(kHeadDim)), kSeed};
  CudaDecodePlan plan;
  Check(CudaDecodePlan::Create(shape, lengths, 2, sm_count, &plan), "plan");
  void* d_workspace = nullptr;
  CheckCuda(cudaMalloc(&d_workspace, plan.workspace_bytes()), "workspace");
  Check(plan.Upload(d_workspace, stream), "upload");
  std::vector<float> q(size_t(2) * kQHeads * kHeadDim);
  for (float& x : q) x = gauss(rng);
  float* d_q = DeviceCopy(q);
  float *d_out = nullptr, *d_lse = nullptr;
  CheckCuda(cudaMalloc(&d_out, q.size() * sizeof(float)), "out");
  CheckCuda(cudaMalloc(&d_lse, size_t(2) * kQHeads * sizeof(float)), "lse");
  Check(CudaDecodeRun(plan, views, 2, d_q, d_workspace, PartialStatesOut{d_out, d_lse}, stream), "decode");
  CheckCuda(cudaStreamSynchronize(stream), "decode step");
  std::vector<float> out(q.size());
  CheckCuda(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost), "copy out");

  // 5. The fp64 reference over the same pages, copied back to the host.
  std::vector<uint8_t> fp8_host(fp8.page_bytes() * kFp8Pages), tq3_host(tq3.page_bytes() * kTq3Pages);
  CheckCuda(cudaMemcpy(fp8_host.data(), d_fp8, fp8_host.size(), cudaMemcpyDeviceToHost), "copy fp8 pool");
  CheckCuda(cudaMemcpy(tq3_host.data(), d_tq3, tq3_host.size(), cudaMemcpyDeviceToHost), "copy tq3 pool");
  const PagedKvView host_views[2] = {
      {fp8, fp8_host.data(), 2, fp8_indptr.data(), fp8_ids.data(), fp8_last.data()},
      {tq3, tq3_host.data(), 2, tq3_indptr.data(), tq3_ids.data(), tq3_last.data()}};
  HadamardRotation rotation;
  Check(HadamardRotation::Create(kHeadDim, kSeed, &rotation), "rotation");
  const std::vector<int32_t> q_indptr = {0, 1, 2};
  const AttentionQueries queries{q.data(), q_indptr.data(), 2, kQHeads, shape.sm_scale};
  std::vector<double> ref, ref_lse;
  Check(ReferenceAttention(host_views, queries, &rotation, &ref, &ref_lse), "reference");
  double err2 = 0.0, ref2 = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    err2 += (out[i] - ref[i]) * (out[i] - ref[i]);
    ref2 += ref[i] * ref[i];
  }
  const double rel_l2 = std::sqrt(err2 / ref2);
  std::printf("cuda_example: %d + %d cached tokens (FP8 %d pages, TQ3 %d pages), %d partial items, decode vs fp64 "
              "reference: relative L2 error %.2e\n",
              kSeqTokens[0], kSeqTokens[1], int(fp8_ids.size()), int(tq3_ids.size()), plan.total_items(), rel_l2);
  return rel_l2 <= 1e-3 ? 0 : 1;
}
