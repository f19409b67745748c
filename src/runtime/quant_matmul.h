// Matrix products of GGUF weight matrices with fp32 activations, the way llama.cpp's CPU backend computes
// them, so our logits track llama.cpp's closely:
//   Q4_0 / Q8_0 weights: activations quantized per 32-block to Q8_0 (int8 codes, fp16 scale d = amax/127)
//   Q4_1 weights:        activations quantized to Q8_1 (Q8_0 plus s = d * sum(codes), fp16), so that the
//                        weight block's min m contributes m * s
//   everything else:     weights widened to fp32 once at load, fp32 dot products.
// ref: ggml-cpu quants (vec_dot_q4_1_q8_1, vec_dot_q8_0_q8_0: the arithmetic, reimplemented). The codes are
// rounded to nearest-even with inverse scale 127/amax, as ggml's AVX2 quantize_row_q8_* does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/status.h"
#include "minimakv/thread_pool.h"

namespace minimakv {

inline constexpr int kQ8BlockElements = 32;

// One 32-element block of quantized activations.
struct Q8Block {
  float d;       // fp16-rounded scale, widened
  float s;       // fp16-rounded d * sum(qs), widened (used by Q4_1 only)
  int8_t qs[kQ8BlockElements];
};

// A weight matrix [rows][cols] (ggml dims[0] = cols).
// On CPUs with AVX-512 VNNI, Q4_0/Q4_1/Q8_0 rows are also repacked at load (vnni_*) in groups of 8 rows
// (4 row pairs), one record per group and 32-block: the pairs' codes (Q4_*: each row's 16 nibble bytes as
// stored; Q8_0: 32 codes + 128, unsigned, as vpdpbusd multiplies unsigned x signed), then their fp32 scales.
// Rows are padded to a multiple of 8 with zero codes and scales. Q4_1 mins: fp32 [16-row group][block][16].
struct WeightMatrix {
  std::string name;
  GgmlType type = GgmlType::kF32;  // kQ4_0, kQ4_1, kQ8_0 (in place) or kF32 (f32 owned)
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;  // quantized blocks, row-major, in the mapped file
  int64_t row_bytes = 0;
  std::vector<float> f32;         // [rows][cols] when type == kF32
  int64_t vnni_blocks = 0;        // 32-blocks per row; 0: not repacked
  std::vector<uint8_t> vnni_qs;
  std::vector<uint16_t> vnni_min;

  // Wraps a GGUF tensor of rank 2: keeps Q4_0/Q4_1/Q8_0 in place, widens any other type to fp32.
  static Status FromTensor(const GgufTensorInfo& tensor, WeightMatrix* out);
  // Row `r` as fp32 (embedding lookups).
  void DequantizeRow(int64_t r, float* out) const;
};

// Quantizes `count` activations (a multiple of 32) into count/32 blocks.
void QuantizeQ8(const float* x, int64_t count, Q8Block* out);

// Quantized activations, reused between MatMul calls.
struct MatMulScratch {
  std::vector<Q8Block> q8;  // AVX2 / scalar paths
  // VNNI path: codes [tokens][cols], d [tokens][blocks], Q8_1 sums s [tokens][blocks] (Q4_1 weights) or
  // int32 lane biases [tokens][blocks][8] (-offset * the sum of each lane's 4 codes: Q4_0, Q8_0 weights).
  std::vector<int8_t> qs;
  std::vector<float> d, s;
  std::vector<int32_t> bias_lanes;
};

enum class MatMulPath { kAuto, kAvx2, kScalar };  // kAuto: AVX-512 VNNI when the weights were repacked

// out[t][r] = sum_c w[r][c] * x[t][c] for t < tokens, r < rows.
//   x [tokens][cols] fp32, out [tokens][rows]. `scratch` is reused between calls. Every path gives the scalar
//   reference's value up to fp32 summation order (the integer block dot products are exact).
void MatMul(const WeightMatrix& w, const float* x, int64_t tokens, float* out, ThreadPool* pool,
            MatMulScratch* scratch, MatMulPath path = MatMulPath::kAuto);
// MatMul of several matrices with the same input (wq/wk/wv, gate/up): on the VNNI path the activations are
// quantized once and all rows run in one parallel region (a decode step has ~4 instead of ~7 per layer).
// Same results as separate MatMul calls. outs[i] is [tokens][ws[i]->rows].
void MatMulGroup(std::span<const WeightMatrix* const> ws, const float* x, int64_t tokens,
                 std::span<float* const> outs, ThreadPool* pool, MatMulScratch* scratch);
// True when this CPU runs the AVX-512 VNNI path (and weights are repacked at load).
bool MatMulHasVnni();

// Dot product kernels, exposed for tests (scalar reference vs the SIMD path).
float DotQ8Row(GgmlType type, const uint8_t* row, const Q8Block* x, int64_t blocks, bool force_scalar);
float DotF32(const float* a, const float* b, int64_t n);

}  // namespace minimakv
