#include "runtime/prompt_attention.h"

// GCC 12's intrinsic headers build some results from _mm512_undefined_ps(), which -Wmaybe-uninitialized flags
// at every inlined use (a header false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>

#include "minimakv/partial_state.h"
#include "minimakv/scalar_formats.h"
#include "runtime/quant_matmul.h"

namespace minimakv {
namespace {

float RoundFp16(float x) { return Fp16ToFloat(FloatToFp16(x)); }

// ---- scalar reference ----

// Softmax attention of one query over n contiguous keys/values (row stride `stride` floats), writing the
// normalized output and the base-2 LSE of the scaled scores. With round_weights the normalized weights are
// rounded to fp16 before the value sum (llama.cpp's f16 V product).
void AttendContiguous(const float* q, const float* keys, const float* values, int64_t n, int64_t stride,
                      int head_dim, float sm_scale, bool round_weights, std::vector<float>* scores, float* out,
                      float* lse_log2) {
  scores->resize(size_t(n));
  float* s = scores->data();
  float max_score = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = DotF32(q, keys + j * stride, head_dim) * sm_scale;
    max_score = std::max(max_score, s[j]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max_score);
    sum += s[j];
  }
  const float inv = float(1.0 / sum);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float w = round_weights ? RoundFp16(s[j] * inv) : s[j] * inv;
    const float* v = values + j * stride;
    for (int i = 0; i < head_dim; ++i) out[i] += w * v[i];
  }
  if (lse_log2 != nullptr) *lse_log2 = float(double(max_score) * double(kLog2e) + std::log2(sum));
}

void PromptAttentionScalar(const PromptAttentionArgs& a, ThreadPool* pool) {
  const int nq = a.num_q_heads, hd = a.head_dim, group = a.num_q_heads / a.num_kv_heads;
  const int64_t q_dim = int64_t(nq) * hd;
  pool->ParallelFor(a.tokens * nq, 4, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / nq;
      const int h = int(i % nq);
      const int g = h / group;
      AttendContiguous(a.q + t * q_dim + int64_t(h) * hd, a.k + int64_t(g) * hd, a.v + int64_t(g) * hd,
                       a.key_offset + t + 1, a.kv_stride, hd, a.sm_scale, a.round_weights_fp16, &scores,
                       a.out + t * q_dim + int64_t(h) * hd,
                       a.lse_log2 != nullptr ? a.lse_log2 + t * nq + h : nullptr);
    }
  });
}

// ---- AVX-512 ----

constexpr int kLanes = 16;                     // floats per zmm
constexpr int kKeyTile = 64;                   // keys per tile: 4 zmm of scores per query row
constexpr int kKeyVecs = kKeyTile / kLanes;
constexpr int kRowBlock = 4;                   // query rows sharing each transposed-key load (16 accumulators)
constexpr int kMaxItemRows = 48;               // rows (tokens x group heads) of one work item: O fits in L1
constexpr int kMaxSimdHeadDim = 128;
constexpr int kPvChunkVecs = 4;                // value dims per accumulation pass: 4 rows x 4 zmm accumulators
// Scores below this (after subtracting the running max) give exp() < 2^-125: treated as that tiny value
// instead of a denormal, which only matters against sums >= 1.
constexpr float kMinExpArg = -87.0f;
// ln(2) split for Cody-Waite range reduction: kLn2Hi has 16 significant bits, so n * kLn2Hi is exact for the
// |n| <= 126 used here.
constexpr float kLn2Hi = 0.693145751953125f;
constexpr float kLn2Lo = 1.428606765330187e-06f;

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-7 Taylor polynomial (truncation
// error r^8 / 8! < 6e-9 relative), scaled by 2^n with vscalefps. Within a few ulp of std::exp.
__attribute__((target("avx512f"), always_inline)) inline __m512 ExpAvx512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kMinExpArg));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Keys of every KV head as tiles [head][tile][dim][kKeyTile], zero past the last key.
void TransposeKeys(const PromptAttentionArgs& a, int64_t num_tiles, float* kt, ThreadPool* pool) {
  const int hd = a.head_dim;
  const int64_t num_keys = a.key_offset + a.tokens;
  pool->ParallelFor(int64_t(a.num_kv_heads) * num_tiles, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int g = int(i / num_tiles);
      const int64_t tile = i % num_tiles;
      float* dst = kt + i * hd * kKeyTile;
      for (int jj = 0; jj < kKeyTile; ++jj) {
        const int64_t j = tile * kKeyTile + jj;
        if (j < num_keys) {
          const float* src = a.k + j * a.kv_stride + int64_t(g) * hd;
          for (int d = 0; d < hd; ++d) dst[d * kKeyTile + jj] = src[d];
        } else {
          for (int d = 0; d < hd; ++d) dst[d * kKeyTile + jj] = 0.0f;
        }
      }
    }
  });
}

// Scaled scores of 4 query rows against one key tile; keys at or past a row's n_keys are -inf.
__attribute__((target("avx512f,avx512bw"), always_inline)) inline void TileScores(
    const float* const q[kRowBlock], const float* kt_tile, int hd, float sm_scale, int64_t key_begin,
    const int64_t n_keys[kRowBlock], __m512 s[kRowBlock][kKeyVecs]) {
  // Sixteen named accumulators: GCC keeps an array parameter in memory across the loop.
  __m512 s00 = _mm512_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
  __m512 s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
  const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3];
  for (int d = 0; d < hd; ++d) {
    const float* kd = kt_tile + d * kKeyTile;
    const __m512 k0 = _mm512_loadu_ps(kd), k1 = _mm512_loadu_ps(kd + 16), k2 = _mm512_loadu_ps(kd + 32),
                 k3 = _mm512_loadu_ps(kd + 48);
    __m512 qd = _mm512_set1_ps(q0[d]);
    s00 = _mm512_fmadd_ps(qd, k0, s00);
    s01 = _mm512_fmadd_ps(qd, k1, s01);
    s02 = _mm512_fmadd_ps(qd, k2, s02);
    s03 = _mm512_fmadd_ps(qd, k3, s03);
    qd = _mm512_set1_ps(q1[d]);
    s10 = _mm512_fmadd_ps(qd, k0, s10);
    s11 = _mm512_fmadd_ps(qd, k1, s11);
    s12 = _mm512_fmadd_ps(qd, k2, s12);
    s13 = _mm512_fmadd_ps(qd, k3, s13);
    qd = _mm512_set1_ps(q2[d]);
    s20 = _mm512_fmadd_ps(qd, k0, s20);
    s21 = _mm512_fmadd_ps(qd, k1, s21);
    s22 = _mm512_fmadd_ps(qd, k2, s22);
    s23 = _mm512_fmadd_ps(qd, k3, s23);
    qd = _mm512_set1_ps(q3[d]);
    s30 = _mm512_fmadd_ps(qd, k0, s30);
    s31 = _mm512_fmadd_ps(qd, k1, s31);
    s32 = _mm512_fmadd_ps(qd, k2, s32);
    s33 = _mm512_fmadd_ps(qd, k3, s33);
  }
  s[0][0] = s00; s[0][1] = s01; s[0][2] = s02; s[0][3] = s03;
  s[1][0] = s10; s[1][1] = s11; s[1][2] = s12; s[1][3] = s13;
  s[2][0] = s20; s[2][1] = s21; s[2][2] = s22; s[2][3] = s23;
  s[3][0] = s30; s[3][1] = s31; s[3][2] = s32; s[3][3] = s33;
  const __m512 scale = _mm512_set1_ps(sm_scale);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int i = 0; i < kRowBlock; ++i) {
    const int64_t valid = n_keys[i] - key_begin;  // keys of this tile the row may see
    for (int c = 0; c < kKeyVecs; ++c) {
      s[i][c] = _mm512_mul_ps(s[i][c], scale);
      const int64_t lane_limit = valid - c * kLanes;
      if (lane_limit < kLanes) {
        const __mmask16 keep =
            _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32(int32_t(std::max<int64_t>(lane_limit, 0))));
        s[i][c] = _mm512_mask_mov_ps(neg_inf, keep, s[i][c]);
      }
    }
  }
}

// o[i][dims] = alpha[i] * o[i][dims] + sum_j p[i][j] * v[j][dims] over `keys` keys, for kVecs zmm of dims.
template <int kVecs>
__attribute__((target("avx512f"), always_inline)) inline void AccumulateValues(
    const float p[kRowBlock][kKeyTile], int keys, const float* v, int64_t stride, const float alpha[kRowBlock],
    float* const o[kRowBlock]) {
  __m512 acc[kRowBlock][kVecs];
  for (int i = 0; i < kRowBlock; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int c = 0; c < kVecs; ++c) acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(o[i] + c * kLanes), a);
  }
  for (int j = 0; j < keys; ++j) {
    const float* vj = v + j * stride;
    __m512 vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = _mm512_loadu_ps(vj + c * kLanes);
    for (int i = 0; i < kRowBlock; ++i) {
      const __m512 pij = _mm512_set1_ps(p[i][j]);
      for (int c = 0; c < kVecs; ++c) acc[i][c] = _mm512_fmadd_ps(pij, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < kRowBlock; ++i) {
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o[i] + c * kLanes, acc[i][c]);
  }
}

__attribute__((target("avx512f"))) void AccumulateValuesAllDims(const float p[kRowBlock][kKeyTile], int keys,
                                                                const float* v, int64_t stride, int hd,
                                                                const float alpha[kRowBlock],
                                                                float* const o[kRowBlock]) {
  for (int d0 = 0; d0 < hd; d0 += kPvChunkVecs * kLanes) {
    float* const od[kRowBlock] = {o[0] + d0, o[1] + d0, o[2] + d0, o[3] + d0};
    switch (std::min(kPvChunkVecs, (hd - d0) / kLanes)) {
      case 1: AccumulateValues<1>(p, keys, v + d0, stride, alpha, od); break;
      case 2: AccumulateValues<2>(p, keys, v + d0, stride, alpha, od); break;
      case 3: AccumulateValues<3>(p, keys, v + d0, stride, alpha, od); break;
      default: AccumulateValues<4>(p, keys, v + d0, stride, alpha, od); break;
    }
  }
}

__attribute__((target("avx512f"), always_inline)) inline float ReduceMax(const __m512 s[kKeyVecs]) {
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(s[0], s[1]), _mm512_max_ps(s[2], s[3])));
}

// Which of the three passes of the fp16-weight emulation, or the single online-softmax pass.
enum class Pass { kOnline, kMax, kSum, kRoundedWeights };

// One work item: KV head g, query tokens [t0, t1). Rows r = (t - t0) * group + (h - g * group).
__attribute__((target("avx512f,avx512bw,f16c"))) void AttendItemAvx512(const PromptAttentionArgs& a,
                                                                       const float* kt_head, int g, int64_t t0,
                                                                       int64_t t1) {
  const int hd = a.head_dim, group = a.num_q_heads / a.num_kv_heads;
  const int64_t q_dim = int64_t(a.num_q_heads) * hd;
  const int rows = int(t1 - t0) * group;
  alignas(64) float o[kMaxItemRows][kMaxSimdHeadDim];
  alignas(64) float p[kRowBlock][kKeyTile];
  float m[kMaxItemRows];
  double l[kMaxItemRows];
  const float* q_row[kMaxItemRows];
  int64_t n_keys[kMaxItemRows + kRowBlock];
  for (int r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group;
    const int h = g * group + r % group;
    q_row[r] = a.q + t * q_dim + int64_t(h) * hd;
    n_keys[r] = a.key_offset + t + 1;
    m[r] = -INFINITY;
    l[r] = 0.0;
    std::fill(o[r], o[r] + hd, 0.0f);
  }
  const int64_t num_keys = a.key_offset + t1;  // the last row's
  const int64_t num_tiles = (num_keys + kKeyTile - 1) / kKeyTile;
  const float* v_head = a.v + int64_t(g) * hd;
  static constexpr Pass kOnlinePasses[] = {Pass::kOnline};
  static constexpr Pass kRoundedPasses[] = {Pass::kMax, Pass::kSum, Pass::kRoundedWeights};
  const Pass* passes = a.round_weights_fp16 ? kRoundedPasses : kOnlinePasses;
  const int num_passes = a.round_weights_fp16 ? 3 : 1;
  for (int pi = 0; pi < num_passes; ++pi) {
    const Pass pass = passes[pi];
    for (int64_t tile = 0; tile < num_tiles; ++tile) {
      const int64_t key_begin = tile * kKeyTile;
      const float* kt_tile = kt_head + tile * hd * kKeyTile;
      for (int r0 = 0; r0 < rows; r0 += kRowBlock) {
        const int nb = std::min(kRowBlock, rows - r0);
        const int64_t block_keys = n_keys[r0 + nb - 1];  // rows ascend in token order
        if (block_keys <= key_begin) continue;          // the whole block is causally masked here
        const float* qb[kRowBlock];
        int64_t nk[kRowBlock];
        for (int i = 0; i < kRowBlock; ++i) {
          const int r = r0 + std::min(i, nb - 1);  // short blocks repeat their last row, results dropped
          qb[i] = q_row[r];
          nk[i] = n_keys[r];
        }
        __m512 s[kRowBlock][kKeyVecs];
        TileScores(qb, kt_tile, hd, a.sm_scale, key_begin, nk, s);
        if (pass == Pass::kMax) {
          for (int i = 0; i < nb; ++i) m[r0 + i] = std::max(m[r0 + i], ReduceMax(s[i]));
          continue;
        }
        float blk_alpha[kRowBlock] = {1.0f, 1.0f, 1.0f, 1.0f};
        for (int i = 0; i < nb; ++i) {
          const int r = r0 + i;
          if (pass == Pass::kOnline) {
            const float m_new = std::max(m[r], ReduceMax(s[i]));
            blk_alpha[i] = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf), 1 if the max stays
            m[r] = m_new;
          }
          const __m512 mv = _mm512_set1_ps(m[r]);
          const __m512 inv_sum = _mm512_set1_ps(pass == Pass::kRoundedWeights ? float(1.0 / l[r]) : 1.0f);
          __m512 psum = _mm512_setzero_ps();
          for (int c = 0; c < kKeyVecs; ++c) {
            const __mmask16 live = _mm512_cmp_ps_mask(s[i][c], _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
            __m512 e = _mm512_maskz_mov_ps(live, ExpAvx512(_mm512_sub_ps(s[i][c], mv)));
            psum = _mm512_add_ps(psum, e);
            if (pass == Pass::kRoundedWeights) {
              e = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(e, inv_sum),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            }
            _mm512_store_ps(p[i] + c * kLanes, e);
          }
          if (pass != Pass::kRoundedWeights) l[r] = l[r] * double(blk_alpha[i]) + double(_mm512_reduce_add_ps(psum));
        }
        if (pass == Pass::kSum) continue;
        // Short blocks (the item's last rows) fill up with zero weights into a discarded accumulator.
        alignas(64) float unused_rows[kRowBlock][kMaxSimdHeadDim];
        float* ob[kRowBlock];
        for (int i = 0; i < kRowBlock; ++i) {
          if (i < nb) {
            ob[i] = o[r0 + i];
          } else {
            ob[i] = unused_rows[i];
            std::fill(p[i], p[i] + kKeyTile, 0.0f);
            std::fill(unused_rows[i], unused_rows[i] + hd, 0.0f);
          }
        }
        const int keys = int(std::min<int64_t>(kKeyTile, block_keys - key_begin));
        AccumulateValuesAllDims(p, keys, v_head + key_begin * a.kv_stride, a.kv_stride, hd, blk_alpha, ob);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t t = t0 + r / group;
    const int h = g * group + r % group;
    float* out = a.out + t * q_dim + int64_t(h) * hd;
    if (a.round_weights_fp16) {
      std::copy(o[r], o[r] + hd, out);  // weights were normalized before the value sum
    } else {
      const float inv = float(1.0 / l[r]);
      for (int d = 0; d < hd; ++d) out[d] = o[r][d] * inv;
    }
    if (a.lse_log2 != nullptr) a.lse_log2[t * a.num_q_heads + h] = float(double(m[r]) * double(kLog2e) + std::log2(l[r]));
  }
}

}  // namespace

bool PromptAttentionUsesSimd(int head_dim, int group) {
  return HasAvx512() && head_dim % kLanes == 0 && head_dim <= kMaxSimdHeadDim && group >= 1 &&
         group <= kMaxItemRows;
}

void PromptAttention(const PromptAttentionArgs& a, ThreadPool* pool, PromptAttentionScratch* scratch,
                     bool force_scalar) {
  if (a.tokens <= 0) return;
  const int group = a.num_q_heads / a.num_kv_heads;
  if (force_scalar || !PromptAttentionUsesSimd(a.head_dim, group)) {
    PromptAttentionScalar(a, pool);
    return;
  }
  const int64_t num_keys = a.key_offset + a.tokens;
  const int64_t num_tiles = (num_keys + kKeyTile - 1) / kKeyTile;
  const int64_t head_floats = num_tiles * a.head_dim * kKeyTile;
  scratch->keys_transposed.resize(size_t(a.num_kv_heads * head_floats));
  float* kt = scratch->keys_transposed.data();
  TransposeKeys(a, num_tiles, kt, pool);
  const int64_t item_tokens = std::max(1, kMaxItemRows / group);
  const int64_t token_tiles = (a.tokens + item_tokens - 1) / item_tokens;
  // Item i: token tile (token_tiles - 1 - i / kv_heads), the heaviest (latest tokens) first.
  pool->ParallelForEach(token_tiles * a.num_kv_heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t tile = token_tiles - 1 - i / a.num_kv_heads;
      const int g = int(i % a.num_kv_heads);
      const int64_t t0 = tile * item_tokens;
      AttendItemAvx512(a, kt + g * head_floats, g, t0, std::min(a.tokens, t0 + item_tokens));
    }
  });
}

}  // namespace minimakv
