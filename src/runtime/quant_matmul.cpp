#include "runtime/quant_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "minimakv/scalar_formats.h"

namespace minimakv {
namespace {

constexpr float kQ8MaxCode = 127.0f;
// Weight block sizes in bytes (ggml-common.h layouts; see gguf_reader.cpp).
constexpr int64_t kQ4_0Bytes = 18;
constexpr int64_t kQ4_1Bytes = 20;
constexpr int64_t kQ8_0Bytes = 34;
constexpr int kNibbleOffset = 8;  // Q4_0 codes are unsigned nibbles offset by 8

uint16_t LoadU16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

bool HasAvx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
}

float DotQ8RowScalar(GgmlType type, const uint8_t* row, const Q8Block* x, int64_t blocks) {
  float sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const Q8Block& y = x[b];
    int32_t sumi = 0;
    if (type == GgmlType::kQ8_0) {
      const uint8_t* blk = row + b * kQ8_0Bytes;
      const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
      for (int j = 0; j < kQ8BlockElements; ++j) sumi += int32_t(qs[j]) * y.qs[j];
      sum += Fp16ToFloat(LoadU16(blk)) * y.d * float(sumi);
    } else if (type == GgmlType::kQ4_0) {
      const uint8_t* blk = row + b * kQ4_0Bytes;
      const uint8_t* qs = blk + 2;
      for (int j = 0; j < 16; ++j) {
        sumi += (int32_t(qs[j] & 15) - kNibbleOffset) * y.qs[j];
        sumi += (int32_t(qs[j] >> 4) - kNibbleOffset) * y.qs[j + 16];
      }
      sum += Fp16ToFloat(LoadU16(blk)) * y.d * float(sumi);
    } else {  // Q4_1
      const uint8_t* blk = row + b * kQ4_1Bytes;
      const uint8_t* qs = blk + 4;
      for (int j = 0; j < 16; ++j) {
        sumi += int32_t(qs[j] & 15) * y.qs[j];
        sumi += int32_t(qs[j] >> 4) * y.qs[j + 16];
      }
      sum += Fp16ToFloat(LoadU16(blk)) * y.d * float(sumi) + Fp16ToFloat(LoadU16(blk + 2)) * y.s;
    }
  }
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Hardware fp16 -> fp32 (exact, the same value as Fp16ToFloat).
__attribute__((target("avx2,fma,f16c"))) inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// Unsigned nibbles of 16 bytes as 32 bytes: low nibbles are elements 0..15, high nibbles 16..31.
__attribute__((target("avx2,fma,f16c"))) __m256i Nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(packed, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
  return _mm256_set_m128i(hi, lo);
}

__attribute__((target("avx2,fma,f16c"))) float DotQ8RowAvx2(GgmlType type, const uint8_t* row, const Q8Block* x,
                                                        int64_t blocks) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  float min_sum = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const Q8Block& y = x[b];
    const __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
    __m256i products16;
    float scale;
    if (type == GgmlType::kQ4_1) {
      const uint8_t* blk = row + b * kQ4_1Bytes;
      products16 = _mm256_maddubs_epi16(Nibbles(blk + 4), yq);  // unsigned x signed, no saturation (15*127*2)
      scale = HalfToFloat(LoadU16(blk)) * y.d;
      min_sum += HalfToFloat(LoadU16(blk + 2)) * y.s;
    } else {
      __m256i wq;
      if (type == GgmlType::kQ4_0) {
        const uint8_t* blk = row + b * kQ4_0Bytes;
        wq = _mm256_sub_epi8(Nibbles(blk + 2), _mm256_set1_epi8(kNibbleOffset));
        scale = HalfToFloat(LoadU16(blk)) * y.d;
      } else {
        const uint8_t* blk = row + b * kQ8_0Bytes;
        wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        scale = HalfToFloat(LoadU16(blk)) * y.d;
      }
      // signed x signed through maddubs: |w| (unsigned) times y carrying w's sign.
      products16 = _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(yq, wq));
    }
    const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(products16, ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), sums, acc);
  }
  return HorizontalSum(acc) + min_sum;
}

// One weight row against kTokenGroup activation rows: the weight block is unpacked once and its scales
// converted once for all of them (prefill), otherwise the same arithmetic as DotQ8RowAvx2.
constexpr int kTokenGroup = 4;
__attribute__((target("avx2,fma,f16c"))) void DotQ8RowGroupAvx2(GgmlType type, const uint8_t* row,
                                                                 const Q8Block* x, int64_t blocks, float* out) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kTokenGroup];
  float min_sum[kTokenGroup];
  for (int g = 0; g < kTokenGroup; ++g) {
    acc[g] = _mm256_setzero_ps();
    min_sum[g] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i wq;
    float dw, mw = 0.0f;
    if (type == GgmlType::kQ4_1) {
      const uint8_t* blk = row + b * kQ4_1Bytes;
      wq = Nibbles(blk + 4);
      dw = HalfToFloat(LoadU16(blk));
      mw = HalfToFloat(LoadU16(blk + 2));
    } else if (type == GgmlType::kQ4_0) {
      const uint8_t* blk = row + b * kQ4_0Bytes;
      wq = _mm256_sub_epi8(Nibbles(blk + 2), _mm256_set1_epi8(kNibbleOffset));
      dw = HalfToFloat(LoadU16(blk));
    } else {
      const uint8_t* blk = row + b * kQ8_0Bytes;
      wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      dw = HalfToFloat(LoadU16(blk));
    }
    const __m256i w_abs = type == GgmlType::kQ4_1 ? wq : _mm256_sign_epi8(wq, wq);
    for (int g = 0; g < kTokenGroup; ++g) {
      const Q8Block& y = x[g * blocks + b];
      __m256i yq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs));
      if (type != GgmlType::kQ4_1) yq = _mm256_sign_epi8(yq, wq);
      const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, yq), ones));
      acc[g] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y.d), sums, acc[g]);
      min_sum[g] += mw * y.s;
    }
  }
  for (int g = 0; g < kTokenGroup; ++g) out[g] = HorizontalSum(acc[g]) + min_sum[g];
}

__attribute__((target("avx2,fma,f16c"))) float DotF32Avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  float sum = HorizontalSum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

float DotF32(const float* a, const float* b, int64_t n) {
  if (HasAvx2()) return DotF32Avx2(a, b, n);
  float s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float DotQ8Row(GgmlType type, const uint8_t* row, const Q8Block* x, int64_t blocks, bool force_scalar) {
  if (!force_scalar && HasAvx2()) return DotQ8RowAvx2(type, row, x, blocks);
  return DotQ8RowScalar(type, row, x, blocks);
}

void QuantizeQ8(const float* x, int64_t count, Q8Block* out) {
  for (int64_t b = 0; b < count / kQ8BlockElements; ++b) {
    const float* v = x + b * kQ8BlockElements;
    float amax = 0.0f;
    for (int j = 0; j < kQ8BlockElements; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / kQ8MaxCode;
    const float inv = amax != 0.0f ? kQ8MaxCode / amax : 0.0f;
    Q8Block& q = out[b];
    int32_t code_sum = 0;
    for (int j = 0; j < kQ8BlockElements; ++j) {
      const int code = int(std::nearbyint(v[j] * inv));  // default rounding mode: nearest, ties to even
      q.qs[j] = int8_t(code);
      code_sum += code;
    }
    q.d = Fp16ToFloat(FloatToFp16(d));
    q.s = Fp16ToFloat(FloatToFp16(d * float(code_sum)));
  }
}

Status WeightMatrix::FromTensor(const GgufTensorInfo& tensor, WeightMatrix* out) {
  if (tensor.dims.size() != 2) {
    return Status::InvalidArgument("weight '" + tensor.name + "' has rank " + std::to_string(tensor.dims.size()) +
                                   ", expected 2");
  }
  out->name = tensor.name;
  out->cols = tensor.dims[0];
  out->rows = tensor.dims[1];
  out->row_bytes = int64_t(tensor.size_bytes) / out->rows;
  if (tensor.type == GgmlType::kQ4_0 || tensor.type == GgmlType::kQ4_1 || tensor.type == GgmlType::kQ8_0) {
    out->type = tensor.type;
    out->data = tensor.data;
    return Status::Ok();
  }
  out->type = GgmlType::kF32;
  out->f32.resize(size_t(tensor.num_elements));
  return DequantizeToFloat(tensor.type, tensor.data, tensor.num_elements, out->f32.data());
}

void WeightMatrix::DequantizeRow(int64_t r, float* out) const {
  if (type == GgmlType::kF32) {
    std::memcpy(out, f32.data() + r * cols, size_t(cols) * sizeof(float));
    return;
  }
  (void)DequantizeToFloat(type, data + r * row_bytes, cols, out);  // type and size checked at load
}

void MatMul(const WeightMatrix& w, const float* x, int64_t tokens, float* out, ThreadPool* pool,
            std::vector<Q8Block>* scratch) {
  const int64_t rows = w.rows, cols = w.cols;
  // Row tiles of this many weight rows are reused across every token while they sit in L1/L2.
  constexpr int64_t kRowTile = 16;
  if (w.type == GgmlType::kF32) {
    pool->ParallelFor(rows, kRowTile, [&](int64_t r0, int64_t r1) {
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t r = r0; r < r1; ++r) out[t * rows + r] = DotF32(w.f32.data() + r * cols, x + t * cols, cols);
      }
    });
    return;
  }
  const int64_t blocks = cols / kQ8BlockElements;
  scratch->resize(size_t(tokens * blocks));
  Q8Block* q = scratch->data();
  pool->ParallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) QuantizeQ8(x + t * cols, cols, q + t * blocks);
  });
  pool->ParallelFor(rows, kRowTile, [&](int64_t r0, int64_t r1) {
    for (int64_t rt = r0; rt < r1; rt += kRowTile) {
      const int64_t re = std::min(r1, rt + kRowTile);
      int64_t t = 0;
      if (HasAvx2()) {
        float group_out[kTokenGroup];
        for (; t + kTokenGroup <= tokens; t += kTokenGroup) {
          for (int64_t r = rt; r < re; ++r) {
            DotQ8RowGroupAvx2(w.type, w.data + r * w.row_bytes, q + t * blocks, blocks, group_out);
            for (int g = 0; g < kTokenGroup; ++g) out[(t + g) * rows + r] = group_out[g];
          }
        }
      }
      for (; t < tokens; ++t) {
        for (int64_t r = rt; r < re; ++r) {
          out[t * rows + r] = DotQ8Row(w.type, w.data + r * w.row_bytes, q + t * blocks, blocks, false);
        }
      }
    }
  });
}

}  // namespace minimakv
