// Which SM pipe an instruction uses, from throughput alone: each kernel runs kIters iterations of kChains
// independent chains of one (or two) instruction kinds; if mixing kinds A and B takes max(A, B) they issue to
// different pipes, if A + B they share one. Used to decide what the TQ3 code expansion can move off the integer
// ALU pipe (docs/cuda-notes.md, v8). Build and run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -o /tmp/pipe_probe bench/cuda/pipe_probe.cu && /tmp/pipe_probe   (prints us per kernel)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

namespace {
constexpr int kIters = 4096;
constexpr int kChains = 8;
constexpr int kBlocks = 132 * 16;
constexpr int kThreads = 256;

__device__ inline uint32_t Prmt(uint32_t a, uint32_t b, uint32_t s) {
  uint32_t d;
  asm volatile("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}
__device__ inline uint32_t CvtE4m3(uint32_t a) {
  uint32_t d;
  asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %1; cvt.rn.f16x2.e4m3x2 %0, l; }" : "=r"(d) : "r"(a));
  return d;
}
__device__ inline uint32_t Lop(uint32_t a, uint32_t b) {
  uint32_t d;
  asm volatile("lop3.b32 %0, %1, %2, 0x0F0F0F0F, 0x6A;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ inline uint32_t ImadHi(uint32_t a, uint32_t b) {
  uint32_t d;
  asm volatile("mad.hi.u32 %0, %1, %2, %1;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ inline uint32_t Hfma2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm volatile("fma.rn.f16x2 %0, %1, %2, %1;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

template <int kA, int kB>  // kinds: 0 none, 1 prmt, 2 cvt e4m3, 3 lop3, 4 imad.hi, 5 hfma2
__global__ void Probe(uint32_t* out, uint32_t seed) {
  uint32_t x[kChains];
  for (int c = 0; c < kChains; ++c) x[c] = seed * (threadIdx.x + 3 * c + 1);
  auto step = [](int kind, uint32_t v, uint32_t k) -> uint32_t {
    switch (kind) {
      case 1: return Prmt(v, k, v);  // selector = low 16 bits of v
      case 2: return CvtE4m3(v);
      case 3: return Lop(v, k);
      case 4: return ImadHi(v, k);
      case 5: return Hfma2(v, k);
      default: return v;
    }
  };
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      x[c] = step(kA, x[c], seed + c);
      if (kB) x[c] = step(kB, x[c], seed - c);
    }
  }
  uint32_t r = 0;
  for (int c = 0; c < kChains; ++c) r ^= x[c];
  if (r == 0x12345678u) out[threadIdx.x] = r;
}

template <int kA, int kB>
float Time(uint32_t* out) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  Probe<kA, kB><<<kBlocks, kThreads>>>(out, 12345u);
  cudaEventRecord(a);
  Probe<kA, kB><<<kBlocks, kThreads>>>(out, 12345u);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1e3f;
}
}  // namespace

int main() {
  uint32_t* out;
  cudaMalloc(&out, 4096);
  const char* names[] = {"", "prmt", "cvt.e4m3x2", "lop3", "imad.hi", "hfma2"};
  std::printf("us for %d warp-instructions per SM-sub-partition-chain set (kinds alone and mixed 1:1)\n", kIters);
#define ONE(A) std::printf("%-12s alone %8.1f us\n", names[A], Time<A, 0>(out));
#define TWO(A, B) std::printf("%-12s + %-10s %8.1f us\n", names[A], names[B], Time<A, B>(out));
  ONE(1) ONE(2) ONE(3) ONE(4) ONE(5)
  TWO(1, 2) TWO(1, 3) TWO(1, 4) TWO(1, 5) TWO(2, 5) TWO(3, 4)
  std::printf("%s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
