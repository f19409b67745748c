// AVX-512 attention kernels. Compiled with per-function target attributes (no global -m flags); only called
// when kernels/cpu/cpu_dispatch.cpp has checked the CPU features.
//
// Structure of one task (one KV head, <= 8 query rows sharing each key and value):
//   1. queries scaled by sm_scale*log2(e) (and rotated for TQ3), stored in the codec's lane order;
//   2. per block of up to kBlockKeys keys of a page:
//      scores  tiles of KT keys x ROWS rows (<= 16 accumulators); each key is unpacked once per 32 or 64
//              coordinates and multiplied into every row; 16 dot products are reduced together by a transpose
//              tree (Reduce16), then scaled by the key's scale;
//      softmax one max / exp2 pass over the block (online softmax in base 2, ref: FlashAttention-2, Sec. 3.1);
//      values  accumulators for ROWS rows x C chunks of 16 coordinates stay in registers while every value of
//              the block is unpacked once per chunk set and multiplied by each row's weight.
//   3. out = acc / sum, lane order undone, TQ3 rotated back once per row.
// Lane orders: BF16 splits 32 packed bf16 into even and odd coordinates (one shift, one AND for 32 values);
// FP8 widens 64 E4M3 codes through two 128-entry byte tables into exact fp32 bits, leaving an interleaved
// order; TQ3 takes nibbles of two 32-bit code words alternately (tq3_codec.h: nibble layout, see Tq3Lanes). The
// query is permuted the same way, so dot products are unchanged and the value accumulators are un-permuted once at the end.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/key_blocks.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/cpu/avx512_exp2.h"  // (and <immintrin.h>)

#define MINIMAKV_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,fma,f16c")))

namespace minimakv::cpu {
namespace {

constexpr int kLanes = 16;        // fp32 lanes of a zmm register
constexpr int kBlockKeys = 64;    // keys scored before one softmax pass: scores of 8 rows stay in L1
constexpr int kMaxHeadDim = 256;
constexpr int kFp8TableEntries = 128;  // E4M3 magnitudes: the sign bit is handled apart

using simd::Exp2;  // avx512_exp2.h

// Lane i of the result = sum of the 16 lanes of v[i]: a transpose-and-add tree, 45 instructions for 16 sums
// instead of 16 separate horizontal reductions.
MINIMAKV_AVX512_TARGET inline __m512 Reduce16(const __m512 (&v)[16]) {
  __m512 t[8];
  for (int k = 0; k < 8; ++k) {
    // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3].
    t[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  }
  __m512 u[4];
  for (int k = 0; k < 4; ++k) {
    // Per 128-bit lane: the lane's partial sums of v[4k .. 4k+3].
    const __m512d x = _mm512_castps_pd(t[2 * k]);
    const __m512d y = _mm512_castps_pd(t[2 * k + 1]);
    u[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  constexpr int kEvenLanes = _MM_SHUFFLE(2, 0, 2, 0);
  constexpr int kOddLanes = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], kEvenLanes), _mm512_shuffle_f32x4(u[0], u[1], kOddLanes));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], kEvenLanes), _mm512_shuffle_f32x4(u[2], u[3], kOddLanes));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, kEvenLanes), _mm512_shuffle_f32x4(w0, w1, kOddLanes));
}

// ---- codecs: unpack one "step" of coordinates of a vector into kChunks registers, in the codec's lane order.
// Lane(c) gives the coordinate that lane order position c (0 <= c < head_dim) holds.

struct Bf16Lanes {
  static constexpr KvFormat kFormat = KvFormat::kBf16;
  static constexpr int kStepCoords = 32;
  static constexpr int kChunks = 2;
  static int Coordinate(int c) { return c / 32 * 32 + (c % 32) % 16 * 2 + (c % 32) / 16; }
  struct State {};
  MINIMAKV_AVX512_TARGET static void Unpack(const State&, const uint8_t* codes, int step, __m512 (&out)[kChunks]) {
    const __m512i x = _mm512_loadu_si512(codes + 64 * step);
    out[0] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));                              // even coordinates
    out[1] = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xFFFF0000u))));  // odd ones
  }
};

struct Fp8Lanes {
  static constexpr KvFormat kFormat = KvFormat::kFp8;
  static constexpr int kStepCoords = 64;
  static constexpr int kChunks = 4;
  // Chunk g, lane 4L + k holds coordinate 16L + 4g + k (byte unpacks work inside 128-bit lanes).
  static int Coordinate(int c) {
    const int base = c / 64 * 64;
    const int g = (c % 64) / 16;
    const int lane = c % 16;
    return base + 16 * (lane / 4) + 4 * g + lane % 4;
  }
  struct State {
    // fp32 bit pattern of each E4M3 magnitude (exact: E4M3 values, subnormals included, are normal fp32):
    // byte 3 and byte 2 of the pattern (bytes 1, 0 are zero). Two registers hold each 128-entry table.
    __m512i top_lo, top_hi, mid_lo, mid_hi;
  };
  static void BuildTables(uint8_t (&top)[kFp8TableEntries], uint8_t (&mid)[kFp8TableEntries]) {
    for (int code = 0; code < kFp8TableEntries; ++code) {
      const uint32_t bits = FloatBits(E4m3ToFloat(uint8_t(code)));
      top[code] = uint8_t(bits >> 24);
      mid[code] = uint8_t(bits >> 16);
    }
  }
  MINIMAKV_AVX512_TARGET static State MakeState() {
    uint8_t top[kFp8TableEntries];
    uint8_t mid[kFp8TableEntries];
    BuildTables(top, mid);
    State s;
    s.top_lo = _mm512_loadu_si512(top);
    s.top_hi = _mm512_loadu_si512(top + 64);
    s.mid_lo = _mm512_loadu_si512(mid);
    s.mid_hi = _mm512_loadu_si512(mid + 64);
    return s;
  }
  MINIMAKV_AVX512_TARGET static void Unpack(const State& s, const uint8_t* codes, int step, __m512 (&out)[kChunks]) {
    const __m512i c = _mm512_loadu_si512(codes + 64 * step);
    // 7-bit table lookups (bit 7 of the index is ignored), then the sign bit copied into byte 3.
    const __m512i sign_mask = _mm512_set1_epi8(char(0x80));
    __m512i top = _mm512_permutex2var_epi8(s.top_lo, c, s.top_hi);
    top = _mm512_ternarylogic_epi32(top, c, sign_mask, 0xF8);  // top | (c & 0x80)
    const __m512i mid = _mm512_permutex2var_epi8(s.mid_lo, c, s.mid_hi);
    const __m512i words_lo = _mm512_unpacklo_epi8(mid, top);  // 16-bit upper halves of codes 16L + 0..7
    const __m512i words_hi = _mm512_unpackhi_epi8(mid, top);  // codes 16L + 8..15
    const __m512i zero = _mm512_setzero_si512();
    out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, words_lo));
    out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, words_lo));
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, words_hi));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, words_hi));
  }
};

// The spill nibbles of one TQ3 group (coordinates 24..31, tq3_codec.h): nibble n = bit 3 of nibble n of W0, W1,
// W2 as index bits 0, 1, 2. The masked words have disjoint bits after the shifts by 0, 1, 2 (one add chain, two
// LEAs), and the sum's bits 3, 7, .. 31 move down to bits 0, 4, .. 28. Scalar: the ALU ports it uses are the
// ones the vector unpack and FMAs leave idle.
inline uint32_t Tq3SpillNibbles(const uint8_t* group) {
  constexpr uint32_t kSpillBits = 0x88888888u;  // bit 3 of every nibble
  const auto spill = [group](int i) {  // word i, masked: one load each
    uint32_t word;
    std::memcpy(&word, group + 4 * i, sizeof word);
    return uint64_t(word & kSpillBits);
  };
  const uint64_t sum = spill(0) + (spill(1) << 1) + (spill(2) << 2);
  return uint32_t(sum >> 3);
}

// A dword broadcast straight from memory (a load-port uop). With the intrinsic, GCC reuses the general-register
// copy that Tq3SpillNibbles loads and broadcasts from it, a shuffle-port uop (in-process A/B: 0.98x the TQ3 time).
MINIMAKV_AVX512_TARGET inline __m512i BroadcastDwordFromMemory(const uint8_t* p) {
  __m512i x;
  asm("vpbroadcastd %1, %0" : "=v"(x) : "m"(*reinterpret_cast<const uint32_t*>(p)));
  return x;
}

struct Tq3Lanes {
  static constexpr KvFormat kFormat = KvFormat::kTq3;
  static constexpr int kStepCoords = 32;
  static constexpr int kChunks = 2;
  // Chunk h, lane j holds coordinate 16 h + 8 (j % 2) + j / 2 of the group: lanes alternate between the two
  // source words of the chunk (W0, W1 for h = 0; W2 and the spill word for h = 1), nibble j / 2 of each.
  static int Coordinate(int c) {
    const int j = c % 16;
    return c / 16 * 16 + 8 * (j % 2) + j / 2;
  }
  struct State {
    __m512 centroids;     // entry i = Tq3Centroid(i % 8): VPERMPS reads index bits 0-3, bit 3 is a spill bit
    __m512i nibble_shift;  // lane j: 4 * (j / 2) bits
  };
  MINIMAKV_AVX512_TARGET static State MakeState() {
    alignas(64) float centroids[kLanes];
    alignas(64) int32_t shifts[kLanes];
    for (int j = 0; j < kLanes; ++j) {
      centroids[j] = Tq3Centroid(j % 8);
      shifts[j] = 4 * (j / 2);
    }
    State s;
    s.centroids = _mm512_load_ps(centroids);
    s.nibble_shift = _mm512_load_si512(shifts);
    return s;
  }
  // Per 32 coordinates: 5 vector ops (two VPSRLVD, two VPERMPS, one VPBROADCASTD from a general register that
  // merges the spill word into the odd lanes of W2's broadcast), two broadcast loads, and the scalar spill
  // nibbles (3 loads, 6 ALU ops). Measured against the spill indices by VPERMB + GF2P8AFFINEQB (as in the AMX
  // expansion; 6 vector ops, no scalar work): that one took 1.02-1.11x this one's time (in-process A/B, one
  // thread, TQ3 rows 1, 4 and 6), since here the FMAs compete for the vector ports.
  MINIMAKV_AVX512_TARGET static void Unpack(const State& s, const uint8_t* codes, int step, __m512 (&out)[kChunks]) {
    const uint8_t* group = codes + 12 * step;
    constexpr __mmask16 kOddLanes = 0xAAAA;
    const __m512i w01 = _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group)));
    const __m512i w2 = BroadcastDwordFromMemory(group + 8);
    const __m512i w2_spill = _mm512_mask_set1_epi32(w2, kOddLanes, int(Tq3SpillNibbles(group)));
    out[0] = _mm512_permutexvar_ps(_mm512_srlv_epi32(w01, s.nibble_shift), s.centroids);
    out[1] = _mm512_permutexvar_ps(_mm512_srlv_epi32(w2_spill, s.nibble_shift), s.centroids);
  }
};

template <typename Codec>
MINIMAKV_AVX512_TARGET typename Codec::State MakeCodecState() {
  if constexpr (Codec::kFormat == KvFormat::kBf16) {
    return {};
  } else {
    return Codec::MakeState();
  }
}

// Multiplier applied to a vector's decoded lanes: BF16 none, FP8 the fp32 scale, TQ3 the fp16 scale.
template <typename Codec>
inline float VectorScale(const uint8_t* scale_bytes) {
  if constexpr (Codec::kFormat == KvFormat::kFp8) {
    float scale;
    std::memcpy(&scale, scale_bytes, sizeof scale);
    return scale;
  } else if constexpr (Codec::kFormat == KvFormat::kTq3) {
    uint16_t scale;
    std::memcpy(&scale, scale_bytes, sizeof scale);
    return Fp16ToFloat(scale);
  } else {
    return 1.0f;
  }
}

// scales[0..n) as fp32: FP8 stores fp32, TQ3 fp16 (converted 16 at a time).
template <typename Codec>
MINIMAKV_AVX512_TARGET void LoadScales(const uint8_t* stored, int n, float* scales) {
  if constexpr (Codec::kFormat == KvFormat::kTq3) {
    int j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      _mm512_storeu_ps(scales + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(stored + 2 * j))));
    }
    for (; j < n; ++j) scales[j] = VectorScale<Codec>(stored + 2 * size_t(j));
  } else {
    std::memcpy(scales, stored, sizeof(float) * size_t(n));
  }
}

struct alignas(64) Workspace {
  float q[kMaxAvx512TaskRows][kMaxHeadDim];      // scaled queries, codec lane order
  float acc[kMaxAvx512TaskRows][kMaxHeadDim];    // unnormalized outputs, codec lane order
  float scores[kMaxAvx512TaskRows][kBlockKeys];  // base-2 scores, then weights times the value scale
  float key_scale[kBlockKeys];
  float value_scale[kBlockKeys];
  float running_max[kMaxAvx512TaskRows];
  float running_sum[kMaxAvx512TaskRows];
};

// Scores of keys [0, n) of a block for ROWS rows: ws.scores[r][j] = q_r . k_j (unscaled by the key scale).
// While scoring, the values of the same keys are prefetched (the value pass reads them next), a slice of the
// tile's values per step rather than all at once: session 10's in-process A/B (BF16, Llama shape, 32K, 2 threads,
// median of 40 rounds) measured 0.95-0.99 of the time of the one burst per tile (4 runs of 4 below 1), as the AMX
// kernels' score pass already does per coordinate chunk.
template <typename Codec, int ROWS>
MINIMAKV_AVX512_TARGET void ScoreBlock(const typename Codec::State& state, const uint8_t* keys, size_t key_bytes,
                                       const uint8_t* values, int n, int head_dim, Workspace& ws) {
  constexpr int kKeysPerTile = kLanes / ROWS;
  const int steps = head_dim / Codec::kStepCoords;
  alignas(64) float tile_sums[kLanes];
  for (int j0 = 0; j0 < n; j0 += kKeysPerTile) {
    const uint8_t* tile_values = values + size_t(j0) * key_bytes;
    const size_t value_tile_bytes = size_t(std::min(kKeysPerTile, n - j0)) * key_bytes;
    const size_t value_slice_bytes = CacheLineSliceBytes(value_tile_bytes, size_t(steps));
    const uint8_t* key_ptr[kKeysPerTile];
    for (int kt = 0; kt < kKeysPerTile; ++kt) key_ptr[kt] = keys + size_t(std::min(j0 + kt, n - 1)) * key_bytes;
    __m512 acc[kLanes];
    for (int i = 0; i < kLanes; ++i) acc[i] = _mm512_setzero_ps();
    for (int step = 0; step < steps; ++step) {
      PrefetchL2Slice(tile_values, value_tile_bytes, size_t(step), value_slice_bytes);
      for (int kt = 0; kt < kKeysPerTile; ++kt) {
        __m512 key[Codec::kChunks];
        Codec::Unpack(state, key_ptr[kt], step, key);
        for (int c = 0; c < Codec::kChunks; ++c) {
          const int offset = step * Codec::kStepCoords + c * kLanes;
          for (int r = 0; r < ROWS; ++r) {
            acc[kt * ROWS + r] = _mm512_fmadd_ps(_mm512_load_ps(&ws.q[r][offset]), key[c], acc[kt * ROWS + r]);
          }
        }
      }
    }
    _mm512_store_ps(tile_sums, Reduce16(acc));
    const int keys_here = std::min(kKeysPerTile, n - j0);
    for (int kt = 0; kt < keys_here; ++kt) {
      for (int r = 0; r < ROWS; ++r) ws.scores[r][j0 + kt] = tile_sums[kt * ROWS + r];
    }
  }
}

// Online-softmax update for one block: scores -> weights (times the value scale), running max / sum updated,
// accumulators rescaled when the max moved.
template <int ROWS>
MINIMAKV_AVX512_TARGET void SoftmaxBlock(int n, int head_dim, bool has_scales, Workspace& ws) {
  for (int r = 0; r < ROWS; ++r) {
    float* s = ws.scores[r];
    __m512 block_max = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += kLanes) {
      const __mmask16 valid = n - j >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
      __m512 x = _mm512_maskz_load_ps(valid, s + j);
      if (has_scales) x = _mm512_mul_ps(x, _mm512_maskz_load_ps(valid, ws.key_scale + j));
      _mm512_mask_store_ps(s + j, valid, x);
      block_max = _mm512_mask_max_ps(block_max, valid, block_max, x);
    }
    const float new_max = std::fmax(ws.running_max[r], _mm512_reduce_max_ps(block_max));
    const float rescale = std::exp2(ws.running_max[r] - new_max);  // 0 on the first block (-inf - finite)
    ws.running_max[r] = new_max;
    const __m512 max_v = _mm512_set1_ps(new_max);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += kLanes) {
      const __mmask16 valid = n - j >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
      const __m512 p = _mm512_maskz_mov_ps(valid, Exp2(_mm512_sub_ps(_mm512_maskz_load_ps(valid, s + j), max_v)));
      sum = _mm512_add_ps(sum, p);
      const __m512 weighted = has_scales ? _mm512_mul_ps(p, _mm512_maskz_load_ps(valid, ws.value_scale + j)) : p;
      _mm512_mask_store_ps(s + j, valid, weighted);
    }
    ws.running_sum[r] = ws.running_sum[r] * rescale + _mm512_reduce_add_ps(sum);
    if (rescale != 1.0f) {
      const __m512 rescale_v = _mm512_set1_ps(rescale);
      for (int i = 0; i < head_dim; i += kLanes) {
        _mm512_store_ps(&ws.acc[r][i], _mm512_mul_ps(_mm512_load_ps(&ws.acc[r][i]), rescale_v));
      }
    }
  }
}

// acc[row0 + r] += sum_j weight[row0 + r][j] * v_j for R rows, CHUNKS chunks of 16 coordinates per pass.
// acc[r][c] += weight[row0 + r][j] * (chunk c of value j), for the pass starting at coordinate `base`.
template <typename Codec, int R, int CHUNKS, int STEPS>
MINIMAKV_AVX512_TARGET __attribute__((always_inline)) inline void AccumulateOne(
    const typename Codec::State& state, const uint8_t* v, int j, int row0, int base, __m512 (&acc)[R][CHUNKS],
    const Workspace& ws) {
  const int first_step = base / Codec::kStepCoords;
  __m512 chunk[CHUNKS];
  for (int s = 0; s < STEPS; ++s) {
    __m512 part[Codec::kChunks];
    Codec::Unpack(state, v, first_step + s, part);
    for (int c = 0; c < Codec::kChunks; ++c) chunk[s * Codec::kChunks + c] = part[c];
  }
  for (int r = 0; r < R; ++r) {
    const __m512 weight = _mm512_set1_ps(ws.scores[row0 + r][j]);
    for (int c = 0; c < CHUNKS; ++c) acc[r][c] = _mm512_fmadd_ps(weight, chunk[c], acc[r][c]);
  }
}

// next_keys (may be null): the next block's keys (next_key_count of them), prefetched during the passes: in pass
// p, slice p of each key (whole cache lines) next to value j. Session 10's in-process A/B (BF16, Llama shape, 32K,
// median of 40 rounds; 2 threads at batch 1 and 4, and 1 thread) measured 0.94-0.95 of the time of prefetching
// whole keys in the first pass (5 runs of 5 below 1).
template <typename Codec, int R, int CHUNKS>
MINIMAKV_AVX512_TARGET void AccumulateValues(const typename Codec::State& state, const uint8_t* values,
                                             size_t value_bytes, int n, int head_dim, int row0,
                                             const uint8_t* next_keys, int next_key_count, Workspace& ws) {
  static_assert(CHUNKS % Codec::kChunks == 0, "a pass covers whole unpack steps");
  constexpr int kStepsPerPass = CHUNKS / Codec::kChunks;
  constexpr int kPassCoords = CHUNKS * kLanes;
  const size_t passes = size_t(head_dim / kPassCoords);
  const size_t key_slice_bytes = CacheLineSliceBytes(value_bytes, passes);
  for (int base = 0; base < head_dim; base += kPassCoords) {
    __m512 acc[R][CHUNKS];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < CHUNKS; ++c) acc[r][c] = _mm512_load_ps(&ws.acc[row0 + r][base + c * kLanes]);
    }
    const size_t slice = size_t(base / kPassCoords) * key_slice_bytes;
    if (next_keys != nullptr && slice < value_bytes) {
      const size_t slice_bytes = std::min(key_slice_bytes, value_bytes - slice);
      for (int j = 0; j < n; ++j) {
        if (j < next_key_count) PrefetchL2(next_keys + size_t(j) * value_bytes + slice, slice_bytes);
        AccumulateOne<Codec, R, CHUNKS, kStepsPerPass>(state, values + size_t(j) * value_bytes, j, row0, base, acc, ws);
      }
      // The next block has more keys than this one (this block is the end of a partly filled page).
      if (base == 0 && n < next_key_count) {
        PrefetchL2(next_keys + size_t(n) * value_bytes, size_t(next_key_count - n) * value_bytes);
      }
    } else {
      for (int j = 0; j < n; ++j) {
        AccumulateOne<Codec, R, CHUNKS, kStepsPerPass>(state, values + size_t(j) * value_bytes, j, row0, base, acc, ws);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < CHUNKS; ++c) _mm512_store_ps(&ws.acc[row0 + r][base + c * kLanes], acc[r][c]);
    }
  }
}


// Value pass for all ROWS rows: at most 24 accumulator registers; FP8 (4 chunks per unpack) with more than 6
// rows runs two row groups (each unpacks every value again). FP8 at 5-6 rows runs one pass of ROWS x 4
// accumulators (24 + 4 value registers + the weight; the compiler takes one half of each byte table from memory,
// no accumulator spills): session 11's in-process A/B at the Qwen3.6-27B shape (rows 6, d 256, 32K, 2 threads,
// median of 20 rounds, 4 runs) measured 0.82-0.93 of the time of two row groups (4 + 2) at batch 1 and 4.
template <typename Codec, int ROWS>
MINIMAKV_AVX512_TARGET void ValueBlock(const typename Codec::State& state, const uint8_t* values,
                                       size_t value_bytes, int n, int head_dim, const uint8_t* next_keys,
                                       int next_key_count, Workspace& ws) {
  if constexpr (ROWS <= 4) {
    AccumulateValues<Codec, ROWS, 4>(state, values, value_bytes, n, head_dim, 0, next_keys, next_key_count, ws);
  } else if constexpr (Codec::kChunks == 2) {
    AccumulateValues<Codec, ROWS, ROWS <= 6 ? 4 : 2>(state, values, value_bytes, n, head_dim, 0, next_keys,
                                                     next_key_count, ws);
  } else if constexpr (ROWS <= 6) {
    AccumulateValues<Codec, ROWS, 4>(state, values, value_bytes, n, head_dim, 0, next_keys, next_key_count, ws);
  } else {
    AccumulateValues<Codec, 4, 4>(state, values, value_bytes, n, head_dim, 0, next_keys, next_key_count, ws);
    AccumulateValues<Codec, ROWS - 4, 4>(state, values, value_bytes, n, head_dim, 4, nullptr, 0, ws);
  }
}

template <typename Codec, int ROWS>
MINIMAKV_AVX512_TARGET void AttendTask(const KernelTask& task) {
  const PageLayout& layout = task.view->layout;
  const int d = layout.head_dim;
  Workspace ws;
  // 1. Queries: scaled, rotated for TQ3, in lane order.
  float rotated[kMaxHeadDim];
  for (int r = 0; r < ROWS; ++r) {
    const float* q = task.q_rows[r];
    if constexpr (Codec::kFormat == KvFormat::kTq3) {
      HadamardForwardAvx512(*task.rotation, q, rotated);
      q = rotated;
    }
    for (int c = 0; c < d; ++c) ws.q[r][c] = q[Codec::Coordinate(c)] * task.score_scale_log2;
    std::memset(ws.acc[r], 0, sizeof(float) * size_t(d));
    ws.running_max[r] = -INFINITY;
    ws.running_sum[r] = 0.0f;
  }
  const typename Codec::State state = MakeCodecState<Codec>();
  constexpr bool kHasScales = Codec::kFormat != KvFormat::kBf16;
  const size_t code_bytes = layout.code_bytes();
  // 2. Blocks of keys, page by page (kernels/cpu/key_blocks.h; it prefetches the next block's scales).
  KeyBlock b;
  for (KeyBlocks<kBlockKeys, kHasScales> blocks(task); blocks.Next(&b);) {
    if constexpr (kHasScales) {
      LoadScales<Codec>(b.page + layout.k_scale_offset(task.kv_head, b.t0), b.n, ws.key_scale);
      LoadScales<Codec>(b.page + layout.v_scale_offset(task.kv_head, b.t0), b.n, ws.value_scale);
    }
    const uint8_t* values = b.page + layout.v_codes_offset(task.kv_head, b.t0);
    ScoreBlock<Codec, ROWS>(state, b.page + layout.k_codes_offset(task.kv_head, b.t0), code_bytes, values, b.n, d, ws);
    SoftmaxBlock<ROWS>(b.n, d, kHasScales, ws);
    ValueBlock<Codec, ROWS>(state, values, code_bytes, b.n, d, b.next_keys, b.next_n, ws);
  }
  // 3. Normalize, restore coordinate order, rotate TQ3 back.
  for (int r = 0; r < ROWS; ++r) {
    const float inv_sum = 1.0f / ws.running_sum[r];
    float* out = task.out_rows[r];
    if constexpr (Codec::kFormat == KvFormat::kTq3) {
      for (int c = 0; c < d; ++c) rotated[Codec::Coordinate(c)] = ws.acc[r][c] * inv_sum;
      HadamardInverseAvx512(*task.rotation, rotated, out);
    } else {
      for (int c = 0; c < d; ++c) out[Codec::Coordinate(c)] = ws.acc[r][c] * inv_sum;
    }
    *task.lse_rows[r] = ws.running_max[r] + std::log2(ws.running_sum[r]);
  }
}

// Tasks of up to kMaxAvx512TaskRows rows (MaxTaskRowsOf, cpu_dispatch.cpp: the planner never gives more).
template <typename Codec>
void AttendFormat(const KernelTask& task) {
  static_assert(kMaxAvx512TaskRows == 8, "one case per row count below");
  switch (task.num_rows) {
    case 1: return AttendTask<Codec, 1>(task);
    case 2: return AttendTask<Codec, 2>(task);
    case 3: return AttendTask<Codec, 3>(task);
    case 4: return AttendTask<Codec, 4>(task);
    case 5: return AttendTask<Codec, 5>(task);
    case 6: return AttendTask<Codec, 6>(task);
    case 7: return AttendTask<Codec, 7>(task);
    default: return AttendTask<Codec, 8>(task);
  }
}

}  // namespace

void AttendAvx512(const KernelTask& task) {
  if (task.num_pages == 0) {
    WriteEmptyState(task, task.view->layout.head_dim);
    return;
  }
  switch (task.view->layout.format) {
    case KvFormat::kBf16: return AttendFormat<Bf16Lanes>(task);
    case KvFormat::kFp8: return AttendFormat<Fp8Lanes>(task);
    case KvFormat::kTq3: return AttendFormat<Tq3Lanes>(task);
  }
}

}  // namespace minimakv::cpu

#else  // not x86-64: the dispatcher never selects this; keep the symbol so the library links.

namespace minimakv::cpu {
void AttendAvx512(const KernelTask& task) { AttendScalar(task); }
}  // namespace minimakv::cpu

#endif
