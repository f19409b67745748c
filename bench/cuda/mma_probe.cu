// Tensor-core throughput of the mma.sync shapes a TQ3 value side could use, measured on the GPU machine: fp16
// m16n8k16 (f32 accumulate; today's value MMA), s8 m16n8k32 (today's key MMA) and e4m3 m16n8k32 (f32 accumulate;
// sm_89+). Each warp runs kChains independent accumulator chains, so the figure is issue throughput, not latency.
// Also the f16x2 -> e4m3x2 conversion (a candidate for splitting probabilities into e4m3 terms) alone and mixed
// 1:1 with prmt, to see whether it shares the integer ALU pipe (bench/cuda/pipe_probe.cu has the other kinds).
// Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -o /tmp/mma_probe bench/cuda/mma_probe.cu && /tmp/mma_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "probe_check.h"

namespace {
constexpr int kIters = 2048;
constexpr int kChains = 4;
constexpr int kWarpsPerBlock = 8;

enum Kind { kHmma = 0, kImma = 1, kFp8Mma = 2, kCvtToE4m3 = 3, kPrmt = 4, kFp8MmaPlusPrmt = 5, kHmmaPlusPrmt = 6 };

__device__ inline void Hmma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ inline void Imma(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ inline void Fp8Mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                              uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// f16x2 -> e4m3x2 -> f16x2: two conversions per call (down and up), no register moves between them.
__device__ inline uint32_t CvtRoundTripE4m3(uint32_t x) {
  uint32_t d;
  asm volatile("{ .reg .b16 r; cvt.rn.satfinite.e4m3x2.f16x2 r, %1; cvt.rn.f16x2.e4m3x2 %0, r; }"
               : "=r"(d)
               : "r"(x));
  return d;
}
__device__ inline uint32_t Prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t d;
  asm volatile("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

template <int kKind>
__global__ void Probe(float* out, uint32_t seed) {
  const uint32_t a = seed * (threadIdx.x + 1);
  const uint32_t b = a ^ 0x3C3C3C3Cu;
  float cf[kChains][4] = {};
  int ci[kChains][4] = {};
  uint32_t x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = a + 977u * c;
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (kKind == kHmma || kKind == kHmmaPlusPrmt) Hmma(cf[c], a, b, a, b, a, b);
      if constexpr (kKind == kImma) Imma(ci[c], a, b, a, b, a, b);
      if constexpr (kKind == kFp8Mma || kKind == kFp8MmaPlusPrmt) Fp8Mma(cf[c], a, b, a, b, a, b);
      if constexpr (kKind == kCvtToE4m3) x[c] = CvtRoundTripE4m3(x[c]);
      if constexpr (kKind == kPrmt || kKind == kFp8MmaPlusPrmt || kKind == kHmmaPlusPrmt) {
        // 4 prmt per MMA: about the ratio of a value side with one lookup per 4 codes (m16n8k32: 16 codes / lane)
#pragma unroll
        for (int k = 0; k < 4; ++k) x[c] = Prmt(x[c], b, x[c]);
      }
    }
  }
  float r = 0;
  for (int c = 0; c < kChains; ++c) r += cf[c][0] + cf[c][3] + float(ci[c][1]) + float(x[c] & 1u);
  if (r == 1234.5f) out[threadIdx.x] = r;
}

template <int kKind>
float TimeUs(float* out, int blocks) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  Probe<kKind><<<blocks, kWarpsPerBlock * 32>>>(out, 12345u);  // warm-up
  CHECK_CUDA(cudaGetLastError());
  float best_ms = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    CHECK_CUDA(cudaEventRecord(start));
    Probe<kKind><<<blocks, kWarpsPerBlock * 32>>>(out, 12345u + rep);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best_ms) best_ms = ms;
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return best_ms * 1e3f;
}
}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const int sms = prop.multiProcessorCount;
  const int blocks = sms * 4;  // 32 warps per SM: 8 per sub-partition
  float* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, 4096));
  const double warp_instr_per_sm = double(blocks) / sms * kWarpsPerBlock * kIters * kChains;
  const double cycles_per_us = clock_khz / 1e3;
  auto report = [&](const char* name, float us, double macs_per_instr) {
    const double cycles = us * cycles_per_us;
    const double instr_per_cycle = warp_instr_per_sm / cycles;  // per SM
    std::printf("%-28s %9.1f us  %6.3f warp-instr/cycle/SM", name, us, instr_per_cycle);
    if (macs_per_instr > 0) std::printf("  %7.0f MAC/cycle/SM", instr_per_cycle * macs_per_instr);
    std::printf("\n");
  };
  std::printf("%s, %d SMs, clock %.0f MHz (rated; the clock under load may differ), %d warps/SM, %d chains\n",
              prop.name, sms, cycles_per_us, blocks / sms * kWarpsPerBlock, kChains);
  report("hmma m16n8k16 f16 (f32 acc)", TimeUs<kHmma>(out, blocks), 16 * 8 * 16);
  report("imma m16n8k32 s8", TimeUs<kImma>(out, blocks), 16 * 8 * 32);
  report("mma m16n8k32 e4m3 (f32 acc)", TimeUs<kFp8Mma>(out, blocks), 16 * 8 * 32);
  report("cvt f16x2 <-> e4m3x2 (2 cvt)", TimeUs<kCvtToE4m3>(out, blocks), 0);
  report("prmt x4 (per chain step)", TimeUs<kPrmt>(out, blocks), 0);
  report("hmma + 4 prmt", TimeUs<kHmmaPlusPrmt>(out, blocks), 16 * 8 * 16);
  report("e4m3 mma + 4 prmt", TimeUs<kFp8MmaPlusPrmt>(out, blocks), 16 * 8 * 32);
  CHECK_CUDA(cudaFree(out));
  return 0;
}
