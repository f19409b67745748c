#include "runtime/quant_matmul.h"

// GCC 12's intrinsic headers build some results from _mm512_undefined_*(), which -Wmaybe-uninitialized flags
// at every inlined use (a header false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

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


// ---- AVX-512 VNNI ----
// The AVX2 path's arithmetic (which is llama.cpp's x86 vec_dot_q4_1_q8_1 / q4_0_q8_0 / q8_0_q8_0 arithmetic)
// lane for lane, on 512-bit registers holding TWO weight rows: per 32-block, int32 lane i of a row is the
// exact sum of the 4 products of elements 4i..4i+3 (vpdpbusd, unsigned weight codes x signed activation codes,
// started from a per-lane bias that removes the weights' code offset), widened and accumulated with
// fmadd(lanes, d_w * d_x, acc) in block order; each row's 8 lanes are summed as HorizontalSum does and Q4_1's
// sum of m * s is added last, accumulated block by block in fp32 (16 rows per vector). So the VNNI results
// equal the AVX2 path's bit for bit; a register tile is 4 row pairs x 4 tokens (16 accumulators), each
// unpacked weight block serving 4 tokens and each activation block 8 rows.

constexpr int kLanes = 16;                 // fp32 / int32 lanes of a zmm
constexpr int kRowLanes = 8;               // lanes per weight row (a ymm half)
constexpr int kVnniRowPairs = 4;           // row pairs per register tile
constexpr int kVnniTokens = 4;             // tokens per register tile
constexpr int kMinRowGroup = 16;           // rows per Q4_1 min-sum vector
constexpr int kVnniTokenBlock = 64;        // tokens whose activations stay in L1/L2 per sweep over a row chunk
constexpr int kQ8_0CodeOffset = 128;       // Q8_0 codes stored as code + 128 (unsigned)

bool HasVnni() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Code offset the weights carry in the VNNI layout (their true value is stored - offset).
int WeightCodeOffset(GgmlType type) {
  return type == GgmlType::kQ4_0 ? kNibbleOffset : type == GgmlType::kQ8_0 ? kQ8_0CodeOffset : 0;
}

// Bytes of one row pair's codes for one block: both rows' 16 nibble bytes (Q4_*) or 32 offset codes (Q8_0).
int64_t VnniBlockBytes(GgmlType type) { return type == GgmlType::kQ8_0 ? 2 * kQ8BlockElements : kQ8BlockElements; }
// Bytes of one row group (kVnniRowPairs pairs) for one block: the pairs' codes, then their fp32 scales.
int64_t VnniGroupBlockBytes(GgmlType type) {
  return kVnniRowPairs * (VnniBlockBytes(type) + 2 * int64_t(sizeof(uint16_t)));
}

void PackVnni(WeightMatrix* w) {
  const int64_t blocks = w->cols / kQ8BlockElements;
  const int64_t groups = (w->rows + 2 * kVnniRowPairs - 1) / (2 * kVnniRowPairs);
  const int64_t pair_block_bytes = VnniBlockBytes(w->type);
  const int64_t group_block_bytes = VnniGroupBlockBytes(w->type);
  w->vnni_blocks = blocks;
  // Padding rows: Q8_0 codes 128 (= 0 after the offset), zero scales.
  w->vnni_qs.assign(size_t(groups * blocks * group_block_bytes), 0);
  if (w->type == GgmlType::kQ8_0) {
    for (int64_t gb = 0; gb < groups * blocks; ++gb) {
      std::fill_n(w->vnni_qs.begin() + gb * group_block_bytes, kVnniRowPairs * pair_block_bytes, uint8_t(kQ8_0CodeOffset));
    }
  }
  if (w->type == GgmlType::kQ4_1) {
    w->vnni_min.assign(size_t(RoundUp(w->rows, kMinRowGroup) * blocks), uint16_t(0));
  } else {
    w->vnni_min.clear();
  }
  for (int64_t r = 0; r < w->rows; ++r) {
    const uint8_t* row = w->data + r * w->row_bytes;
    const int64_t group = r / (2 * kVnniRowPairs), pair = (r / 2) % kVnniRowPairs, half = r % 2;
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* group_block = w->vnni_qs.data() + (group * blocks + b) * group_block_bytes;
      uint8_t* dst = group_block + pair * pair_block_bytes + half * pair_block_bytes / 2;
      uint8_t* scale_dst = group_block + kVnniRowPairs * pair_block_bytes + (pair * 2 + half) * int64_t(sizeof(uint16_t));
      uint16_t scale = 0;
      if (w->type == GgmlType::kQ8_0) {
        const uint8_t* blk = row + b * kQ8_0Bytes;
        scale = LoadU16(blk);
        for (int j = 0; j < kQ8BlockElements; ++j) dst[j] = uint8_t(int(int8_t(blk[2 + j])) + kQ8_0CodeOffset);
      } else {
        const bool q4_1 = w->type == GgmlType::kQ4_1;
        const uint8_t* blk = row + b * (q4_1 ? kQ4_1Bytes : kQ4_0Bytes);
        scale = LoadU16(blk);
        if (q4_1) {
          w->vnni_min[size_t(((r / kMinRowGroup) * blocks + b) * kMinRowGroup + r % kMinRowGroup)] =
              LoadU16(blk + 2);
        }
        std::memcpy(dst, blk + (q4_1 ? 4 : 2), kQ8BlockElements / 2);  // nibbles as stored
      }
      std::memcpy(scale_dst, &scale, sizeof(scale));
    }
  }
}

// One token's activations into the VNNI layout: the same codes, d and s as QuantizeQ8, plus per block the 8
// int32 lane biases -offset * (sum of the lane's 4 codes).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void QuantizeVnniToken(
    const float* x, int64_t blocks, int offset, int8_t* qs, float* d_out, int32_t* bias, float* s_out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* v = x + b * kQ8BlockElements;
    const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + kLanes);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / kQ8MaxCode;
    const float inv = amax != 0.0f ? kQ8MaxCode / amax : 0.0f;
    // vcvtps2dq rounds with MXCSR's mode, nearest-even by default: the same codes as std::nearbyint.
    const __m512i c0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(inv)));
    const __m512i c1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(inv)));
    int8_t* q = qs + b * kQ8BlockElements;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(c0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + kLanes), _mm512_cvtepi32_epi8(c1));
    d_out[b] = Fp16ToFloat(FloatToFp16(d));
    if (s_out != nullptr) {
      const int32_t code_sum = _mm512_reduce_add_epi32(_mm512_add_epi32(c0, c1));
      s_out[b] = Fp16ToFloat(FloatToFp16(d * float(code_sum)));
    }
    if (bias != nullptr) {
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(int8_t(offset)), codes);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + b * kRowLanes), _mm256_sub_epi32(_mm256_setzero_si256(), lanes));
    }
  }
}

void QuantizeVnni(const float* x, int64_t tokens, int64_t cols, GgmlType type, ThreadPool* pool,
                  MatMulScratch* sc) {
  const int64_t blocks = cols / kQ8BlockElements;
  sc->qs.resize(size_t(tokens * cols));
  sc->d.resize(size_t(tokens * blocks));
  const bool q4_1 = type == GgmlType::kQ4_1;
  if (q4_1) {
    sc->s.resize(size_t(tokens * blocks));
  } else {
    sc->bias_lanes.resize(size_t(tokens * blocks * kRowLanes));
  }
  const int offset = WeightCodeOffset(type);
  pool->ParallelFor(tokens, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      QuantizeVnniToken(x + t * cols, blocks, offset, sc->qs.data() + t * cols, sc->d.data() + t * blocks,
                        q4_1 ? nullptr : sc->bias_lanes.data() + t * blocks * kRowLanes,
                        q4_1 ? sc->s.data() + t * blocks : nullptr);
    }
  });
}

__attribute__((target("avx512f,avx512dq"), always_inline)) inline float HorizontalSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Rows [8 * group, 8 * group + 8) x tokens [t0, t0 + kTokens): out[t][r] = lanes + out[t][r] (which holds the
// Q4_1 min sum, else 0). The group's codes and scales for each block are one contiguous 160 / 288-byte record,
// so a row chunk is a single sequential stream for the hardware prefetcher (decode streams all weights).
template <GgmlType kType, int kTokens>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c"))) void VnniTile(const WeightMatrix& w,
                                                                                       int64_t group,
                                                                                       const MatMulScratch& a,
                                                                                       int64_t t0, float* out) {
  constexpr int kPairs = kVnniRowPairs;
  const int64_t blocks = w.vnni_blocks, cols = w.cols;
  constexpr bool kQ4 = kType != GgmlType::kQ8_0;
  constexpr int64_t kBlockBytes = kQ4 ? kQ8BlockElements : 2 * kQ8BlockElements;
  constexpr int64_t kGroupBlockBytes = kPairs * (kBlockBytes + 2 * int64_t(sizeof(uint16_t)));
  const __m512i nibble_mask = _mm512_set1_epi8(0x0F);
  // 128-bit lanes [row0 nibbles, row0 nibbles, row1 nibbles, row1 nibbles], the 2nd and 4th shifted by 4:
  // [row0 elements 0-15, 16-31, row1 elements 0-15, 16-31].
  const __m512i nibble_spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
  const __m512i nibble_shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
  // Pair p's two scales (of the 8 in the record) to lanes 0-7 and 8-15.
  __m512i scale_index[kPairs];
  for (int p = 0; p < kPairs; ++p) {
    scale_index[p] = _mm512_add_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                      _mm512_set1_epi32(2 * p));
  }
  __m512 acc[kPairs][kTokens];
  for (int p = 0; p < kPairs; ++p) {
    for (int t = 0; t < kTokens; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  const uint8_t* record = w.vnni_qs.data() + group * blocks * kGroupBlockBytes;
  for (int64_t b = 0; b < blocks; ++b, record += kGroupBlockBytes) {
    __m512i wq[kPairs];
    __m512 wd[kPairs];
    const __m512 scales = _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(record + kPairs * kBlockBytes))));
    for (int p = 0; p < kPairs; ++p) {
      const uint8_t* src = record + p * kBlockBytes;
      if constexpr (kQ4) {
        const __m512i packed = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
        wq[p] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutexvar_epi64(nibble_spread, packed), nibble_shift),
                                 nibble_mask);
      } else {
        wq[p] = _mm512_loadu_si512(src);
      }
      wd[p] = _mm512_permutexvar_ps(scale_index[p], scales);
    }
    for (int t = 0; t < kTokens; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m512i y = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs.data() + (t0 + t) * cols + b * kQ8BlockElements)));
      const __m512 yd = _mm512_set1_ps(a.d[size_t(tb)]);
      __m512i bias = _mm512_setzero_si512();
      if constexpr (kType != GgmlType::kQ4_1) {
        bias = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bias_lanes.data() + tb * kRowLanes)));
      }
      for (int p = 0; p < kPairs; ++p) {
        const __m512i lanes = _mm512_dpbusd_epi32(bias, wq[p], y);
        acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(wd[p], yd), acc[p][t]);
      }
    }
  }
  for (int p = 0; p < kPairs; ++p) {
    const int64_t r = group * 2 * kPairs + 2 * p;
    for (int t = 0; t < kTokens; ++t) {
      float* o = out + (t0 + t) * w.rows + r;
      if (r < w.rows) o[0] = HorizontalSum8(_mm512_castps512_ps256(acc[p][t])) + o[0];
      if (r + 1 < w.rows) o[1] = HorizontalSum8(_mm512_extractf32x8_ps(acc[p][t], 1)) + o[1];
    }
  }
}

// out[t][r] = sum over blocks of m[r][b] * s[t][b], in block order (fp32, as the AVX2 path's min_sum).
__attribute__((target("avx512f"))) void Q4_1MinSums(const WeightMatrix& w, int64_t r0, int64_t r1,
                                                    const MatMulScratch& a, int64_t t0, int64_t t1, float* out) {
  const int64_t blocks = w.vnni_blocks;
  for (int64_t g = r0 / kMinRowGroup; g * kMinRowGroup < r1; ++g) {
    const uint16_t* m = w.vnni_min.data() + g * blocks * kMinRowGroup;
    const int64_t rows_here = std::min<int64_t>(kMinRowGroup, w.rows - g * kMinRowGroup);
    const __mmask16 keep = __mmask16((1u << rows_here) - 1u);
    for (int64_t t = t0; t < t1; ++t) {
      const float* s = a.s.data() + t * blocks;
      __m512 sum = _mm512_setzero_ps();
      for (int64_t b = 0; b < blocks; ++b) {
        const __m512 mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + b * kMinRowGroup)));
        sum = _mm512_add_ps(sum, _mm512_mul_ps(mins, _mm512_set1_ps(s[b])));
      }
      _mm512_mask_storeu_ps(out + t * w.rows + g * kMinRowGroup, keep, sum);
    }
  }
}

template <GgmlType kType>
void VnniTokens(const WeightMatrix& w, int64_t group, const MatMulScratch& a, int64_t t0, int64_t t1, float* out) {
  int64_t t = t0;
  for (; t + kVnniTokens <= t1; t += kVnniTokens) VnniTile<kType, kVnniTokens>(w, group, a, t, out);
  switch (t1 - t) {
    case 3: VnniTile<kType, 3>(w, group, a, t, out); break;
    case 2: VnniTile<kType, 2>(w, group, a, t, out); break;
    case 1: VnniTile<kType, 1>(w, group, a, t, out); break;
    default: break;
  }
}

// Rows [r0, r1): r0 a multiple of kMinRowGroup, r1 too or the last row.
template <GgmlType kType>
void VnniRows(const WeightMatrix& w, int64_t r0, int64_t r1, const MatMulScratch& a, int64_t tokens, float* out) {
  constexpr int64_t kGroupRows = 2 * kVnniRowPairs;
  const int64_t group_begin = r0 / kGroupRows, group_end = (r1 + kGroupRows - 1) / kGroupRows;
  for (int64_t tb = 0; tb < tokens; tb += kVnniTokenBlock) {
    const int64_t te = std::min(tokens, tb + kVnniTokenBlock);
    if constexpr (kType == GgmlType::kQ4_1) {
      Q4_1MinSums(w, r0, r1, a, tb, te, out);
    } else {
      for (int64_t t = tb; t < te; ++t) std::fill(out + t * w.rows + r0, out + t * w.rows + r1, 0.0f);
    }
    for (int64_t g = group_begin; g < group_end; ++g) VnniTokens<kType>(w, g, a, tb, te, out);
  }
}

void VnniRowsOfType(const WeightMatrix& w, int64_t r0, int64_t r1, const MatMulScratch& a, int64_t tokens,
                    float* out) {
  switch (w.type) {
    case GgmlType::kQ4_0: VnniRows<GgmlType::kQ4_0>(w, r0, r1, a, tokens, out); break;
    case GgmlType::kQ4_1: VnniRows<GgmlType::kQ4_1>(w, r0, r1, a, tokens, out); break;
    default: VnniRows<GgmlType::kQ8_0>(w, r0, r1, a, tokens, out); break;
  }
}

// Several matrices of one type and width over the same activations: one quantization, and one parallel
// region over their stacked rows (each matrix's rows start at a multiple of kMinRowGroup in the stack).
void MatMulVnniGroup(std::span<const WeightMatrix* const> ws, const float* x, int64_t tokens,
                     std::span<float* const> outs, ThreadPool* pool, MatMulScratch* scratch) {
  QuantizeVnni(x, tokens, ws[0]->cols, ws[0]->type, pool, scratch);
  const MatMulScratch& a = *scratch;
  int64_t stacked_rows = 0;
  for (const WeightMatrix* w : ws) stacked_rows += RoundUp(w->rows, kMinRowGroup);
  pool->ParallelFor(stacked_rows, kMinRowGroup, [&](int64_t r0, int64_t r1) {
    int64_t base = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const WeightMatrix& w = *ws[i];
      const int64_t lo = std::max(r0, base), hi = std::min(r1, base + w.rows);
      if (lo < hi) VnniRowsOfType(w, lo - base, hi - base, a, tokens, outs[i]);
      base += RoundUp(w.rows, kMinRowGroup);
    }
  });
}

}  // namespace

bool MatMulHasVnni() { return HasVnni(); }

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
    if (HasVnni() && out->cols % kQ8BlockElements == 0) PackVnni(out);
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
            MatMulScratch* matmul_scratch, MatMulPath path) {
  const int64_t rows = w.rows, cols = w.cols;
  if (w.type != GgmlType::kF32 && w.vnni_blocks > 0 && path == MatMulPath::kAuto) {
    const WeightMatrix* ws[1] = {&w};
    float* outs[1] = {out};
    MatMulVnniGroup(ws, x, tokens, outs, pool, matmul_scratch);
    return;
  }
  std::vector<Q8Block>* scratch = &matmul_scratch->q8;
  const bool simd = path != MatMulPath::kScalar && HasAvx2();
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
      if (simd) {
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
          out[t * rows + r] = DotQ8Row(w.type, w.data + r * w.row_bytes, q + t * blocks, blocks, !simd);
        }
      }
    }
  });
}

void MatMulGroup(std::span<const WeightMatrix* const> ws, const float* x, int64_t tokens,
                 std::span<float* const> outs, ThreadPool* pool, MatMulScratch* scratch) {
  bool fused = !ws.empty() && ws.size() == outs.size();
  for (const WeightMatrix* w : ws) {
    fused = fused && w->vnni_blocks > 0 && w->type == ws[0]->type && w->cols == ws[0]->cols;
  }
  if (fused) {
    MatMulVnniGroup(ws, x, tokens, outs, pool, scratch);
    return;
  }
  for (size_t i = 0; i < ws.size() && i < outs.size(); ++i) MatMul(*ws[i], x, tokens, outs[i], pool, scratch);
}

}  // namespace minimakv
