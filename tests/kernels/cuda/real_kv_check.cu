// minimakv_real_kv_check: the CUDA decode on a real model's KV cache. Reads a KV capture (kv_capture.h, made by
// `minimakv eval capture-kv`), and for every captured layer and format mix (minima: the capture's retention
// policy; fp8: all pages FP8; tq3: all pages TQ3) builds the pages with the CPU codecs (tools/real_kv_check.h),
// uploads them at shuffled physical page ids with poisoned spare pages, and for each TQ3 CTA shape of --tq3-ctas
// (CudaTq3Ctas: auto, narrow, wide, paired; only auto for a step without TQ3 pages) runs one decode step through
// the public API (CudaDecodePlan::Create, Upload, CudaDecodeRun) with one sequence per captured query, then the
// same plan again without a new Upload (as a CUDA graph replays it), and compares:
//   gpu~cpu    the GPU output against the CPU direct kernels on the same pages (required <= --max-rel-l2, 1e-3)
//   lse_diff   the merged LSE (base 2) against the CPU's (required <= 1e-2)
//   ~pages     GPU and CPU against fp64 attention over the same pages (each kernel's own error)
//   ~dense     GPU and CPU against fp64 attention on the dense K/V (format + kernel error), relative L2 and the
//              smallest per-head cosine
//   replay     the second run against the first ("same" when bit-identical; required <= --max-rel-l2)
// Every CUDA call is checked; the output and LSE buffers carry canary bytes on both sides. Exit status: 0 when
// every row passes, 1 when a row fails or a CUDA call fails, 2 for bad usage or a bad capture file.
// Built only with -DMINIMAKV_CUDA=ON (tests/kernels/cuda/CMakeLists.txt); the CPU half is tested by
// tests/tools/real_kv_check_test.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "minimakv/cpu_attention.h"
#include "minimakv/cuda_attention.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_capture.h"
#include "tools/cli_args.h"
#include "tools/json.h"
#include "tools/real_kv_check.h"

namespace {

using namespace minimakv;

constexpr size_t kCanaryBytes = 256;   // on each side of the output and LSE buffers
constexpr uint8_t kCanaryByte = 0x5A;  // also fills the output before the run: a value never written stays 1.5e16

Status CudaStatus(cudaError_t error, const std::string& what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::Internal("CUDA " + what + ": " + cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")");
}

// One device allocation, freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  Status Allocate(size_t bytes, const std::string& what) {
    bytes_ = bytes;
    return CudaStatus(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc " + what + " (" + std::to_string(bytes) + " B)");
  }
  Status Upload(const void* host, size_t bytes, const std::string& what) {
    MINIMAKV_RETURN_IF_ERROR(Allocate(bytes, what));
    if (bytes == 0) return Status::Ok();
    return CudaStatus(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "copy " + what + " to the device");
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  uint8_t* bytes_ptr() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The first corrupted canary byte, or -1.
long FirstBadCanary(const std::vector<uint8_t>& buffer, size_t payload_bytes) {
  for (size_t i = 0; i < kCanaryBytes; ++i) {
    if (buffer[i] != kCanaryByte) return long(i);
    if (buffer[kCanaryBytes + payload_bytes + i] != kCanaryByte) return long(kCanaryBytes + payload_bytes + i);
  }
  return -1;
}

const char* Tq3CtasName(CudaTq3Ctas ctas) {
  switch (ctas) {
    case CudaTq3Ctas::kAuto: return "auto";
    case CudaTq3Ctas::kNarrow: return "narrow";
    case CudaTq3Ctas::kWide: return "wide";
    case CudaTq3Ctas::kPaired: return "paired";
  }
  return "unknown";
}

// The device side of one (layer, mix): pools, CSR arrays and queries, uploaded once for every CTA choice.
struct DeviceStep {
  DeviceBuffer pool[2], indptr[2], ids[2], last[2], q;
  CudaViewLengths lengths[2];
  PagedKvView views[2];
  int num_views = 0;
  bool has_tq3 = false;
};

Status UploadStep(const KvCapture& capture, size_t slot, const RealKvPages& pages, DeviceStep* step) {
  // A format without pages is left out of the step (the plan accepts only the formats present).
  for (int f = 0; f < 2; ++f) {
    const RealKvPool& pool = pages.pools[f];
    if (pool.used_pages() == 0) continue;
    const std::string name = f == RealKvPages::kFp8 ? "FP8" : "TQ3";
    MINIMAKV_RETURN_IF_ERROR(step->pool[f].Upload(pool.base(), pool.pool_bytes(), name + " pool"));
    MINIMAKV_RETURN_IF_ERROR(
        step->indptr[f].Upload(pool.page_indptr.data(), pool.page_indptr.size() * 4, name + " indptr"));
    MINIMAKV_RETURN_IF_ERROR(step->ids[f].Upload(pool.page_ids.data(), pool.page_ids.size() * 4, name + " page ids"));
    MINIMAKV_RETURN_IF_ERROR(
        step->last[f].Upload(pool.last_page_tokens.data(), pool.last_page_tokens.size() * 4, name + " last tokens"));
    step->lengths[step->num_views] = {pool.layout.format, pool.layout.page_tokens, pool.page_indptr.data(),
                                      pool.last_page_tokens.data()};
    step->views[step->num_views] = {pool.layout,         step->pool[f].as<uint8_t>(), pages.num_seqs,
                                    step->indptr[f].as<int32_t>(), step->ids[f].as<int32_t>(),
                                    step->last[f].as<int32_t>()};
    ++step->num_views;
    step->has_tq3 = step->has_tq3 || f == RealKvPages::kTq3;
  }
  const std::vector<float>& q = capture.layers[slot].q;
  return step->q.Upload(q.data(), q.size() * sizeof(float), "queries");
}

// One CudaDecodeRun into an output and LSE framed by canaries (filled with canary bytes first, so a value the
// step never writes stays 1.5e16 and fails the comparison); copies both back and checks the canaries.
Status RunOnce(const CudaDecodePlan& plan, const DeviceStep& step, void* d_workspace, cudaStream_t stream,
               size_t out_values, size_t lse_values, std::vector<float>* out, std::vector<float>* lse) {
  const size_t out_bytes = out_values * sizeof(float), lse_bytes = lse_values * sizeof(float);
  DeviceBuffer d_out, d_lse;
  MINIMAKV_RETURN_IF_ERROR(d_out.Allocate(out_bytes + 2 * kCanaryBytes, "output"));
  MINIMAKV_RETURN_IF_ERROR(d_lse.Allocate(lse_bytes + 2 * kCanaryBytes, "LSE"));
  MINIMAKV_RETURN_IF_ERROR(
      CudaStatus(cudaMemset(d_out.as<void>(), kCanaryByte, out_bytes + 2 * kCanaryBytes), "memset output"));
  MINIMAKV_RETURN_IF_ERROR(
      CudaStatus(cudaMemset(d_lse.as<void>(), kCanaryByte, lse_bytes + 2 * kCanaryBytes), "memset LSE"));
  const PartialStatesOut states{reinterpret_cast<float*>(d_out.bytes_ptr() + kCanaryBytes),
                                reinterpret_cast<float*>(d_lse.bytes_ptr() + kCanaryBytes)};
  // (Each result gets its own name: nvcc warns when a [[nodiscard]] Status is assigned over another.)
  const Status ran = CudaDecodeRun(plan, step.views, step.num_views, step.q.as<float>(), d_workspace, states, stream);
  if (!ran.ok()) return Status::Internal("CudaDecodeRun: " + ran.ToString());
  MINIMAKV_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "decode step"));
  MINIMAKV_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), "after the decode step"));
  std::vector<uint8_t> out_host(out_bytes + 2 * kCanaryBytes), lse_host(lse_bytes + 2 * kCanaryBytes);
  MINIMAKV_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(out_host.data(), d_out.as<void>(), out_host.size(), cudaMemcpyDeviceToHost), "copy output back"));
  MINIMAKV_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpy(lse_host.data(), d_lse.as<void>(), lse_host.size(), cudaMemcpyDeviceToHost), "copy LSE back"));
  if (const long at = FirstBadCanary(out_host, out_bytes); at >= 0) {
    return Status::Internal("the decode wrote outside its output: canary byte " + std::to_string(at));
  }
  if (const long at = FirstBadCanary(lse_host, lse_bytes); at >= 0) {
    return Status::Internal("the decode wrote outside its LSE: canary byte " + std::to_string(at));
  }
  out->resize(out_values);
  lse->resize(lse_values);
  std::memcpy(out->data(), out_host.data() + kCanaryBytes, out_bytes);
  std::memcpy(lse->data(), lse_host.data() + kCanaryBytes, lse_bytes);
  return Status::Ok();
}

// One (layer, mix): pages and CPU figures once, then per TQ3 CTA choice (only auto for a step without TQ3 pages)
// a plan, an Upload, a run and a replay of the same plan without a new Upload; one row per query and choice.
// no_gpu: the CPU output stands in for the GPU's (a dry run of everything but the CUDA calls).
Status CheckLayerMix(const KvCapture& capture, size_t slot, RealKvMix mix, const std::vector<CudaTq3Ctas>& ctas_choices,
                     uint64_t shuffle_seed, int threads, int sm_count, const HadamardRotation& rotation,
                     double max_rel_l2, bool no_gpu, cudaStream_t stream, std::vector<RealKvRow>* rows) {
  RealKvPages pages;
  MINIMAKV_RETURN_IF_ERROR(BuildRealKvPages(capture, slot, mix, shuffle_seed, &pages));
  RealKvCpuSide cpu;
  MINIMAKV_RETURN_IF_ERROR(ComputeRealKvCpuSide(capture, slot, pages, rotation, threads, &cpu));
  if (no_gpu) {
    const size_t first_row = rows->size();
    MINIMAKV_RETURN_IF_ERROR(CompareRealKv(capture, slot, pages, cpu, cpu.out.data(), cpu.lse_log2.data(),
                                           cpu.out.data(), max_rel_l2, rows));
    for (size_t i = first_row; i < rows->size(); ++i) (*rows)[i].gpu_variant = "none:cpu-only";
    return Status::Ok();
  }
  DeviceStep step;
  MINIMAKV_RETURN_IF_ERROR(UploadStep(capture, slot, pages, &step));
  const size_t out_values = capture.layers[slot].q.size();
  const size_t lse_values = size_t(pages.num_seqs) * capture.num_q_heads;
  for (CudaTq3Ctas choice : ctas_choices) {
    if (!step.has_tq3 && choice != CudaTq3Ctas::kAuto) continue;  // the choice only changes the TQ3 kernel
    CudaDecodeShape shape{pages.num_seqs, capture.num_q_heads, capture.kv_heads, capture.head_dim, capture.sm_scale,
                          capture.rotation_seed};
    shape.tq3_ctas = choice;
    CudaDecodePlan plan;
    const Status created = CudaDecodePlan::Create(shape, step.lengths, step.num_views, sm_count, &plan);
    if (!created.ok()) return Status::Internal("CudaDecodePlan::Create: " + created.ToString());
    // Which TQ3 kernel the plan chose ("narrow" where a forced variant does not exist for this shape).
    std::string variant = std::string(Tq3CtasName(choice)) + ":";
    variant += "no-tq3";
    for (int v = 0; v < plan.num_views(); ++v) {
      if (plan.view_format(v) != KvFormat::kTq3) continue;
      variant = std::string(Tq3CtasName(choice)) + ":" +
                (plan.paired_ctas(v) ? "paired" : plan.wide_ctas(v) ? "wide" : "narrow");
    }
    DeviceBuffer d_workspace;
    MINIMAKV_RETURN_IF_ERROR(d_workspace.Allocate(plan.workspace_bytes(), "workspace"));
    const Status uploaded = plan.Upload(d_workspace.as<void>(), stream);
    if (!uploaded.ok()) return Status::Internal("CudaDecodePlan::Upload: " + uploaded.ToString());
    std::vector<float> out, lse, replay_out, replay_lse;
    MINIMAKV_RETURN_IF_ERROR(
        RunOnce(plan, step, d_workspace.as<void>(), stream, out_values, lse_values, &out, &lse));
    MINIMAKV_RETURN_IF_ERROR(
        RunOnce(plan, step, d_workspace.as<void>(), stream, out_values, lse_values, &replay_out, &replay_lse));
    const size_t first_row = rows->size();
    MINIMAKV_RETURN_IF_ERROR(
        CompareRealKv(capture, slot, pages, cpu, out.data(), lse.data(), replay_out.data(), max_rel_l2, rows));
    for (size_t i = first_row; i < rows->size(); ++i) (*rows)[i].gpu_variant = variant;
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  const std::string command = "minimakv_real_kv_check";
  std::string capture_path, mixes_text = "minima,fp8,tq3", ctas_text = "auto,narrow,wide,paired";
  bool json = false, no_gpu = false;
  int64_t seed = 1;
  int threads = 2;
  int64_t anchor_tokens = -1, recent_tokens = -1;  // -1: the capture's policy
  double max_rel_l2 = kRealKvMaxRelL2;
  ArgParser parser(command,
                   "The CUDA decode (CudaDecodePlan::Create / Upload / CudaDecodeRun) on a real model's KV cache from a\n"
                   "capture file (`minimakv eval capture-kv`): per captured layer and format mix, GPU against the CPU\n"
                   "direct kernels on the same pages (relative L2 <= --max-rel-l2) and both against fp64 attention on the\n"
                   "pages and on the dense K/V. Exit 0 when every row passes, 1 on a failure, 2 on bad usage or input.");
  parser.AddString("capture", "FILE", "KV capture file (required)", &capture_path);
  parser.AddString("mixes", "LIST", "format mixes to run, comma-separated: minima, fp8, tq3", &mixes_text);
  // (A shape that does not exist for the capture's GQA group and head_dim runs as the plan falls back.)
  parser.AddString("tq3-ctas", "LIST", "TQ3 kernel CTA shapes to run (CudaTq3Ctas): auto, narrow, wide, paired",
                   &ctas_text);
  parser.AddInt("seed", "seed of the physical page shuffle", &seed);
  parser.AddInt("anchors", "anchor tokens of the Minima mix instead of the capture's (a policy study)", &anchor_tokens);
  parser.AddInt("recent", "recent tokens of the Minima mix instead of the capture's", &recent_tokens);
  parser.AddInt("threads", "CPU threads for the CPU kernels and references", &threads);
  parser.AddDouble("max-rel-l2", "largest GPU vs CPU relative L2 error that passes", &max_rel_l2);
  parser.AddBool("no-gpu", "a dry run without CUDA: the CPU output stands in for the GPU's (checks the capture and\n"
                           "the host side; every gpu figure then equals the cpu one)", &no_gpu);
  parser.AddBool("json", "print one JSON object per (layer, mix, query) row and a final summary object, one per line",
                 &json);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (const Status parsed = parser.Parse(args); !parsed.ok()) {
    std::fprintf(stderr, "%s: %s\n", command.c_str(), parsed.message().c_str());
    return kExitUsage;
  }
  if (parser.help_requested()) {
    std::printf("%s", parser.Help().c_str());
    return kExitOk;
  }
  if (capture_path.empty()) {
    std::fprintf(stderr, "%s: --capture FILE is required\n", command.c_str());
    return kExitUsage;
  }
  std::vector<RealKvMix> mixes;
  for (size_t begin = 0; begin <= mixes_text.size();) {
    const size_t end = std::min(mixes_text.find(',', begin), mixes_text.size());
    RealKvMix mix;
    if (const Status named = ParseRealKvMix(mixes_text.substr(begin, end - begin), &mix); !named.ok()) {
      std::fprintf(stderr, "%s: --mixes: %s\n", command.c_str(), named.message().c_str());
      return kExitUsage;
    }
    mixes.push_back(mix);
    begin = end + 1;
  }
  std::vector<CudaTq3Ctas> ctas_choices;
  for (size_t begin = 0; begin <= ctas_text.size();) {
    const size_t end = std::min(ctas_text.find(',', begin), ctas_text.size());
    const std::string name = ctas_text.substr(begin, end - begin);
    bool known = false;
    for (CudaTq3Ctas c : {CudaTq3Ctas::kAuto, CudaTq3Ctas::kNarrow, CudaTq3Ctas::kWide, CudaTq3Ctas::kPaired}) {
      if (name == Tq3CtasName(c)) ctas_choices.push_back(c), known = true;
    }
    if (!known) {
      std::fprintf(stderr, "%s: --tq3-ctas: unknown CTA shape '%s' (auto, narrow, wide, paired)\n", command.c_str(),
                   name.c_str());
      return kExitUsage;
    }
    begin = end + 1;
  }
  KvCapture capture;
  if (const Status read = ReadKvCapture(capture_path, &capture); !read.ok()) {
    std::fprintf(stderr, "%s: %s\n", command.c_str(), read.ToString().c_str());
    return kExitUsage;
  }
  for (const auto& [name, value, field] : {std::tuple{"anchors", anchor_tokens, &capture.anchor_tokens},
                                           std::tuple{"recent", recent_tokens, &capture.recent_tokens}}) {
    if (value < -1 || value > capture.tokens) {
      std::fprintf(stderr, "%s: --%s %lld outside [0, %lld] (the capture's tokens)\n", command.c_str(), name,
                   (long long)value, (long long)capture.tokens);
      return kExitUsage;
    }
    if (value >= 0) *field = int(value);
  }
  HadamardRotation rotation;
  if (const Status made = HadamardRotation::Create(capture.head_dim, capture.rotation_seed, &rotation); !made.ok()) {
    std::fprintf(stderr, "%s: %s\n", command.c_str(), made.ToString().c_str());
    return kExitUsage;
  }

  cudaDeviceProp prop;
  std::snprintf(prop.name, sizeof(prop.name), "no GPU (--no-gpu)");
  int sm_count = 0;
  cudaStream_t stream = nullptr;
  if (!no_gpu) {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
      std::fprintf(stderr, "%s: no CUDA device\n", command.c_str());
      return kExitFailure;
    }
    for (const Status& setup :
         {CudaStatus(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties"),
          CudaStatus(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), "SM count"),
          CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate")}) {
      if (!setup.ok()) {
        std::fprintf(stderr, "%s: %s\n", command.c_str(), setup.ToString().c_str());
        return kExitFailure;
      }
    }
  }
  CpuAttentionOptions cpu_options;
  std::fprintf(json ? stderr : stdout,
               "%s: %s (%d SMs); capture %s: %d layers x %lld tokens, %d queries, %d q / %d kv heads, d %d, pages of "
               "%d, anchors %d, recent %d (%s)\n  CPU kernels: %s\n",
               command.c_str(), prop.name, sm_count, capture_path.c_str(), int(capture.layers.size()),
               (long long)capture.tokens, capture.num_queries, capture.num_q_heads, capture.kv_heads, capture.head_dim,
               capture.page_tokens, capture.anchor_tokens, capture.recent_tokens, capture.note.c_str(),
               CpuKernelIsaFor(cpu_options, KvFormat::kTq3, capture.num_q_heads / capture.kv_heads, capture.head_dim));
  if (!json) std::printf("%s\n", RealKvTableHeader().c_str());

  int failed_rows = 0, total_rows = 0;
  double worst_gpu_vs_cpu = 0.0;
  std::vector<Status> errors;  // the (layer, mix) steps that could not run
  for (size_t slot = 0; slot < capture.layers.size(); ++slot) {
    for (RealKvMix mix : mixes) {
      std::vector<RealKvRow> rows;
      const Status s =
          CheckLayerMix(capture, slot, mix, ctas_choices, uint64_t(seed), threads, sm_count, rotation, max_rel_l2,
                        no_gpu, stream, &rows);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: layer %d %s: %s\n", command.c_str(), capture.layers[slot].layer, RealKvMixName(mix),
                     s.ToString().c_str());
        errors.push_back(s);
        // A CUDA error leaves the context unusable: stop at the first one.
        if (s.code() == StatusCode::kInternal) break;
        continue;
      }
      for (const RealKvRow& r : rows) {
        ++total_rows;
        failed_rows += r.pass ? 0 : 1;
        worst_gpu_vs_cpu = std::isnan(r.gpu_vs_cpu_rel_l2) ? NAN : std::max(worst_gpu_vs_cpu, r.gpu_vs_cpu_rel_l2);
        if (json) std::printf("%s\n", RealKvRowJson(r).c_str());
      }
      // The short table: per CTA choice, the worst over the queries.
      for (size_t begin = 0; !json && begin < rows.size();) {
        size_t end = begin;
        while (end < rows.size() && rows[end].gpu_variant == rows[begin].gpu_variant) ++end;
        const std::vector<RealKvRow> same(rows.begin() + std::ptrdiff_t(begin), rows.begin() + std::ptrdiff_t(end));
        std::printf("%s\n", RealKvTableRow(WorstRealKvRow(same)).c_str());
        begin = end;
      }
      std::fflush(stdout);
    }
    if (!errors.empty() && errors.back().code() == StatusCode::kInternal) break;
  }
  if (stream != nullptr) {
    if (const Status destroyed = CudaStatus(cudaStreamDestroy(stream), "cudaStreamDestroy"); !destroyed.ok()) {
      errors.push_back(destroyed);
    }
  }
  const bool ok = errors.empty() && failed_rows == 0 && total_rows > 0;
  if (json) {
    JsonValue summary = JsonValue::Object();
    summary.Set("summary", true);
    summary.Set("capture", capture_path);
    summary.Set("device", std::string(prop.name));
    summary.Set("rows", int64_t(total_rows));
    summary.Set("failed_rows", int64_t(failed_rows));
    summary.Set("max_gpu_vs_cpu_rel_l2", std::isfinite(worst_gpu_vs_cpu) ? JsonValue(worst_gpu_vs_cpu) : JsonValue());
    summary.Set("error", errors.empty() ? std::string() : errors.front().ToString());
    summary.Set("pass", ok);
    std::printf("%s\n", summary.Dump().c_str());
  } else {
    std::printf("%s: %d rows (layer x mix x query), %d failed, max GPU vs CPU relative L2 %.2e (limit %.1e): %s\n",
                command.c_str(), total_rows, failed_rows, worst_gpu_vs_cpu, max_rel_l2, ok ? "PASS" : "FAIL");
  }
  return ok ? kExitOk : kExitFailure;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
