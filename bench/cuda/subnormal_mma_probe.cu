// Does the fp16 tensor-core MMA of sm_90 keep fp16 subnormal operands? A candidate TQ3 value layout (docs/cuda-notes.md
// session 19) would feed each value unit u (+-13, 40, 71, 114) to the value MMA as the fp16 subnormal u x 2^-24 (bits:
// sign << 15 | |u|), built by one prmt from a 6-byte table, with no bias to subtract. This probe builds the A
// operands that way from random codes (prmt selectors (m, 4 | s) per value), runs mma.sync m16n8k16 f32.f16.f16.f32
// against random fp16 probabilities, and compares every output with an fp64 reference of sum P x (+-u) x 2^-24. A
// tensor core that flushed subnormals would return zeros. Also times nothing; prints the worst relative error.
// Build and run on the GPU machine (or build here and carry the binary):
//   nvcc -O3 -arch=sm_90 -o subnormal_mma_probe bench/cuda/subnormal_mma_probe.cu && ./subnormal_mma_probe
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "probe_check.h"

namespace {

constexpr int kUnits[4] = {13, 40, 71, 114};

__device__ inline uint32_t Prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// One warp. codes[16 x 16] (row = output coordinate m, column = key k; index = sign << 2 | magnitude),
// p[16 keys x 8 heads] fp16 bits. out[16 x 8] = sum_k value(m, k) * p(k, n), value = +-unit x 2^-24.
__global__ void SubnormalMmaKernel(const uint8_t* codes, const uint16_t* p, float* out) {
  const int lane = threadIdx.x;
  const int g = lane >> 2;
  const int t = lane & 3;
  // Table: bytes 0-3 the magnitudes' units, byte 4 = 0x00 (positive), byte 5 = 0x80 (negative): fp16 subnormal bits.
  const uint32_t table_lo = 13u | 40u << 8 | 71u << 16 | 114u << 24;
  const uint32_t table_hi = 0x00u | 0x80u << 8;
  // A fragment of m16n8k16 (row-major 16 x 16): a0 = (row g, cols 2t, 2t + 1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..),
  // a3 = (g + 8, 2t + 8..). Each register = two fp16 = one prmt with selector nibbles (m_a, 4 | s_a, m_b, 4 | s_b).
  auto operand = [&](int row, int col) {
    const uint32_t ca = codes[row * 16 + col];
    const uint32_t cb = codes[row * 16 + col + 1];
    const uint32_t selector = (ca & 3u) | (4u | (ca >> 2)) << 4 | (cb & 3u) << 8 | (4u | (cb >> 2)) << 12;
    return Prmt(table_lo, table_hi, selector);
  };
  const uint32_t a0 = operand(g, 2 * t);
  const uint32_t a1 = operand(g + 8, 2 * t);
  const uint32_t a2 = operand(g, 2 * t + 8);
  const uint32_t a3 = operand(g + 8, 2 * t + 8);
  // B fragment (col-major 16 x 8): b0 = (rows 2t, 2t + 1, col g), b1 = (rows 2t + 8, 2t + 9, col g).
  const uint32_t b0 = uint32_t(p[(2 * t) * 8 + g]) | uint32_t(p[(2 * t + 1) * 8 + g]) << 16;
  const uint32_t b1 = uint32_t(p[(2 * t + 8) * 8 + g]) | uint32_t(p[(2 * t + 9) * 8 + g]) << 16;
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  // C fragment: c0, c1 = (row g, cols 2t, 2t + 1), c2, c3 = (row g + 8, cols 2t, 2t + 1).
  out[g * 8 + 2 * t] = c[0];
  out[g * 8 + 2 * t + 1] = c[1];
  out[(g + 8) * 8 + 2 * t] = c[2];
  out[(g + 8) * 8 + 2 * t + 1] = c[3];
}

}  // namespace

int main() {
  std::mt19937 rng(19);
  uint8_t* d_codes;
  uint16_t* d_p;
  float* d_out;
  CHECK_CUDA(cudaMalloc(&d_codes, 256));
  CHECK_CUDA(cudaMalloc(&d_p, 128 * 2));
  CHECK_CUDA(cudaMalloc(&d_out, 128 * 4));
  double worst = 0.0;
  int zeros = 0;
  const int kTrials = 200;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint8_t> codes(256);
    for (auto& c : codes) c = uint8_t(rng() & 7u);
    std::vector<uint16_t> p(128);
    std::vector<double> p_value(128);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    for (int i = 0; i < 128; ++i) {
      const __half h = __float2half_rn(uniform(rng));
      p[i] = __half_as_ushort(h);
      p_value[i] = double(__half2float(h));
    }
    CHECK_CUDA(cudaMemcpy(d_codes, codes.data(), 256, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_p, p.data(), 256, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(d_out, 0xFF, 128 * 4));  // NaN poison: every output must be written
    SubnormalMmaKernel<<<1, 32>>>(d_codes, d_p, d_out);
    CHECK_CUDA(cudaGetLastError());
    std::vector<float> out(128);
    CHECK_CUDA(cudaMemcpy(out.data(), d_out, 128 * 4, cudaMemcpyDeviceToHost));
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 8; ++n) {
        double ref = 0.0, scale = 0.0;
        for (int k = 0; k < 16; ++k) {
          const int code = codes[m * 16 + k];
          const double value = (code & 4 ? -1.0 : 1.0) * kUnits[code & 3] * std::ldexp(1.0, -24);
          ref += value * p_value[k * 8 + n];
          scale += std::fabs(value * p_value[k * 8 + n]);
        }
        const double got = out[m * 8 + n];
        if (!std::isfinite(got)) {
          std::printf("FAIL: output (%d, %d) not written or not finite\n", m, n);
          return 1;
        }
        if (got == 0.0 && ref != 0.0) ++zeros;
        const double err = std::fabs(got - ref) / (scale > 0 ? scale : 1.0);
        if (err > worst) worst = err;
      }
    }
  }
  std::printf("subnormal fp16 operands in mma.sync m16n8k16: %d trials x 128 outputs, worst |got - ref| / sum |terms| "
              "= %.3g, outputs flushed to zero: %d\n",
              kTrials, worst, zeros);
  const bool pass = zeros == 0 && worst < 4e-6;  // 16 fp32 additions: <= 16 x 2^-24 of the sum of |terms|
  std::printf("%s\n", pass ? "PASS: subnormal operands kept (fp32 rounding only)" : "FAIL");
  CHECK_CUDA(cudaFree(d_codes));
  CHECK_CUDA(cudaFree(d_p));
  CHECK_CUDA(cudaFree(d_out));
  return pass ? 0 : 1;
}
