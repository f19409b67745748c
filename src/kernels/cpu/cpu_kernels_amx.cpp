// AMX (Advanced Matrix Extensions) attention kernels: the multiply-adds of scores and values run on the tile
// unit (TDPBF16PS: C[16 x 16] fp32 += A[16 x 32] bf16 * B[32 x 16] bf16), the online softmax stays in fp32 AVX-512
// as in kernels/cpu/cpu_kernels_avx512.cpp. Compiled with per-function target attributes; only called when
// kernels/cpu/cpu_dispatch.cpp has checked the CPU features and the OS granted tile state (AmxUsable()).
// ref: Intel SDM vol. 1 ch. 18 (AMX) and vol. 2 (TDPBF16PS, LDTILECFG); Linux Documentation/arch/x86/xstate.rst.
//
// Exactness: bf16 x bf16 products are exact in fp32, so the only roundings are the fp32 accumulations, as in
// the FMA kernels, provided every operand is split exactly into bf16 parts:
//   * queries and softmax weights (fp32, 24-bit significand) into hi + mid + lo bf16 parts (8 bits each, by
//     truncation: each remainder is exact in fp32 and the last one has at most 8 significant bits);
//   * BF16 values are bf16; E4M3 values are exact in bf16 (3-bit mantissa, exponents 2^-9..2^8), their fp32
//     scale is applied afterwards;
//   * TQ3 centroids are units / alpha (tq3_codec.h: kTq3MagnitudeUnits, 8 significant bits at most, so exact in
//     bf16; alpha = kTq3UnitsPerMagnitude): the key and value tiles hold the signed units as one exact bf16 part
//     and 1/alpha is folded into each vector's fp32 scale (fp16 scale / alpha, one fp32 rounding, as the
//     reference's fp32 centroid float(B / alpha) is one rounding). One key tile and one value tile per step.
//   * TQ3 scores on AMX-INT8 (AttendAmxTq3Int8, the default where the CPU has it: cpu_dispatch.cpp): the signed
//     units are exact int8 too, so the key tiles hold them as int8 (64 coordinates per tile row and TDPBSSD) and
//     the query is a 24-bit fixed point per row in three int8 digits (kQueryFixedMax): the digit sums are exact
//     int32, so the score's only errors are the query's fixed-point rounding (6e-8 of max |q| per coordinate)
//     and two fp32 roundings when the digits are combined.
//   * TQ3 values on AMX-INT8 (AttendAmxTq3Int8Values, the default with int8 scores since session 9): the value
//     units as int8 B tiles in VNNI quads, the softmax weights a 24-bit fixed point per row and 64-key block in
//     three unsigned digits (TDPBUSD): the only new error is the weight rounding, at most 3e-8 of the block's
//     largest weight per key (see kWeightFixedMax).
//
// One task (one KV head, R <= 16 query rows: a GQA group of up to 16 heads, or several tokens' groups), per
// block of <= 64 keys of a page:
//   scores  C[16 keys x (3R columns)] = K[16 keys x 32 coords] * Qparts[32 coords x 3R], per 32 coordinates;
//           column p*R + r holds part p of row r; the three part columns are summed after a 16x16 transpose.
//           BF16 keys are loaded from the page as a tile; FP8 and TQ3 keys are expanded into an L1 scratch tile.
//   softmax base-2 online softmax in fp32 (ref: FlashAttention-2, Sec. 3.1), weights times the value scale.
//   values  O[(3R rows) x 16 coords] += Pparts[3R x 32 keys] * V[32 keys x 16 coords]; V is written to an L1
//           scratch tile in the VNNI pair layout (keys 2i, 2i+1 interleaved per coordinate: unpacklo/hi_epi16
//           of two expanded keys), rows p*R + r summed into the fp32 accumulators after each block.
// Lane orders: expansions may permute coordinates inside a step (FP8 byte unpacks, the VNNI interleave); the
// query tiles use the key order, and the accumulators are un-permuted once at the end.
//
// Measured in `minimakv bench --isa amx,avx512` (Llama shape, 32K tokens, batch 1, 2 threads, AMX time over
// AVX-512 time): FP8 0.89x, TQ3 0.71x with the one-part units (0.8-1.25x with the former two-part centroids),
// BF16 1.08x. Which family runs for each (format, task rows, head_dim) is decided in cpu_dispatch.cpp.
// Tasks of 11-16 rows (GQA groups of 9-16 are one task) use three score C tiles and ValueBlockWide; at the
// Qwen3-235B shape (group 16, d 128, 32K, 2 threads) one 16-row task took 0.72-0.87x the time of two 8-row AMX
// tasks (cpu_dispatch.cpp has the figures).
// TQ3 codes (nibble layout of tq3_codec.h) expand by VPSRLVW + VPERMW lookups of a 4x repeated unit table, the
// spill coordinates through a GF2P8AFFINEQB bit transpose (Tq3Amx::Expand: 6 vector operations per 64
// coordinates; sessions 3-5's bit-plane layout took 5, a transpose for all 64).
// The softmax's first pass (key scales, block maximum) runs in ScoreBlock while the scores are in registers,
// and the rows' rescale factors come from one vector Exp2: 0.89-0.96x the TQ3 time at GQA 4 in the same test.
// Tried and measured slower here: expanding a whole 64-key block before its tile products, and double-
// buffered scratch tiles with C read back one round later (both aimed at the stalls of a tile load right
// after the stores that fill it, and of vector loads right after a tile store).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/key_blocks.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/avx512_exp2.h"  // (and <immintrin.h>)

#define MINIMAKV_AMX_TARGET                                                                                      \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,fma,f16c,gfni,avx512bf16,"                  \
                        "amx-tile,amx-bf16,amx-int8")))

namespace minimakv::cpu {
namespace {

// Tile shape and instructions: kernels/cpu/amx_tiles.h (shared with the AMX peak of tools/machine_floors.cpp).
using amx::kTileRowBytes;  // bytes per tile row (the maximum)
using amx::kTileRows;      // rows of every tile we configure
using amx::LoadTileConfig;
using amx::TileDot;
using amx::TileDotInt8;
using amx::TileDotU8S8;
using amx::TileProduct;
using amx::TileLoad;
using amx::TileRelease;
using amx::TileStore;
using amx::TileZero;

constexpr int kLanes = 16;           // fp32 lanes of a zmm register
constexpr int kTileBf16 = 32;        // bf16 per tile row: the K of one TDPBF16PS
constexpr int kTileCols = 16;        // fp32 columns of a C tile
constexpr int kBlockKeys = 64;       // keys scored before one softmax pass
constexpr int kKeyTile = 16;         // keys per score tile (C rows)
constexpr int kValueKeys = 32;       // keys per value product (the K of one TDPBF16PS)
constexpr int kMaxHeadDim = 256;
constexpr int kQueryParts = 3;       // bf16 parts of an fp32 query coordinate or softmax weight
// Score columns / weight rows of a task, kQueryParts per row, in C tiles of 16: tasks of up to kNarrowTaskRows
// rows take 2 (24), wider ones 3 (48).
constexpr int ColumnBlocksFor(int row_capacity) { return (kQueryParts * row_capacity + kTileCols - 1) / kTileCols; }
static_assert(ColumnBlocksFor(kMaxTaskRows) == 3, "three C tiles hold the 48 columns of 16 rows");
constexpr int kFp8TableEntries = 128;


constexpr int kTq3Indices = 8;

using simd::Exp2;  // avx512_exp2.h

// The upper 16 bits of every fp32 lane of a (lanes 0..15) and b (lanes 16..31): exact bf16 when the values
// are bf16-representable.
MINIMAKV_AMX_TARGET inline __m512i PackUpperHalves(__m512 a, __m512 b) {
  const __m512i odd_words = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                             27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(a), odd_words, _mm512_castps_si512(b));
}

// The same words as PackUpperHalves for tile operands of TDPBF16PS, by one VCVTNE2PS2BF16 (lanes 0..15 of a, then
// b): a bf16-representable fp32 converts exactly, so normal values give their upper halves; subnormal ones become
// +-0 (the conversion treats subnormal inputs as zero) where PackUpperHalves keeps a bf16 subnormal, which
// TDPBF16PS reads as zero too (checked on this machine: 0x0001 and 0x0040 times 1.0 give +0), so the products and
// the outputs are the same bits. Only for finite values (a NaN would come out quieted). In-process A/B at the Llama
// shape, FP8 softmax weights: 0.97-0.99 of the FP8 step's time (docs/cpu-notes.md, session 15).
MINIMAKV_AMX_TARGET inline __m512i PackTileBf16(__m512 a, __m512 b) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a));
}

// row[0 .. head_dim) *= factor (the online softmax's rescale of an output row when its running max rose).
MINIMAKV_AMX_TARGET inline void RescaleRow(float* row, int head_dim, float factor) {
  if (factor == 1.0f) return;
  const __m512 factor_v = _mm512_set1_ps(factor);
  for (int i = 0; i < head_dim; i += kLanes) _mm512_store_ps(row + i, _mm512_mul_ps(_mm512_load_ps(row + i), factor_v));
}

// x = hi + mid + lo exactly, each part bf16-representable (truncation keeps every remainder exact).
MINIMAKV_AMX_TARGET inline void SplitThree(__m512 x, __m512 (&parts)[kQueryParts]) {
  const __m512i upper = _mm512_set1_epi32(int(0xFFFF0000u));
  parts[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), upper));
  const __m512 rest = _mm512_sub_ps(x, parts[0]);
  parts[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(rest), upper));
  parts[2] = _mm512_sub_ps(rest, parts[1]);
}

// 16x16 fp32 transpose: out[c] lane k = in[k] lane c.
MINIMAKV_AMX_TARGET inline void Transpose16(const __m512 (&in)[16], __m512 (&out)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(in[2 * i], in[2 * i + 1]);
  }
  __m512 u[16];  // u[4i + k], 128-bit lane L: rows 4i..4i+3 of column 4L + k
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0);
  constexpr int kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  for (int k = 0; k < 4; ++k) {
    const __m512 x = _mm512_shuffle_f32x4(u[k], u[4 + k], kEven);       // lanes 0, 2 of rows 0-3, 4-7
    const __m512 y = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], kEven);  // lanes 0, 2 of rows 8-11, 12-15
    const __m512 x1 = _mm512_shuffle_f32x4(u[k], u[4 + k], kOdd);
    const __m512 y1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], kOdd);
    out[k] = _mm512_shuffle_f32x4(x, y, kEven);
    out[8 + k] = _mm512_shuffle_f32x4(x, y, kOdd);
    out[4 + k] = _mm512_shuffle_f32x4(x1, y1, kEven);
    out[12 + k] = _mm512_shuffle_f32x4(x1, y1, kOdd);
  }
}

// ---- codecs: Expand writes kZmm registers of 32 exact bf16 (one part: see the file comment) for one step of kStepCoords coordinates, in
// the codec's expansion order; Coordinate(e) is the coordinate at expansion position e (0 <= e < head_dim).

struct Bf16Amx {
  static constexpr KvFormat kFormat = KvFormat::kBf16;
  static constexpr int kZmm = 1;
  static constexpr int kStepCoords = 32;
  static constexpr int Coordinate(int e) { return e; }
  struct State {};
  MINIMAKV_AMX_TARGET static void Expand(const State&, const uint8_t* codes, int step, __m512i (&out)[kZmm]) {
    out[0] = _mm512_loadu_si512(codes + 64 * step);
  }
};

struct Fp8Amx {
  static constexpr KvFormat kFormat = KvFormat::kFp8;
  static constexpr int kZmm = 2;
  static constexpr int kStepCoords = 64;
  // Register z, word w (128-bit lane L = w / 8, k = w % 8) holds coordinate 16 L + 8 z + k of the step.
  static constexpr int Coordinate(int e) {
    const int base = e / 64 * 64;
    const int z = (e % 64) / 32;
    const int w = e % 32;
    return base + 16 * (w / 8) + 8 * z + w % 8;
  }
  // GF2P8AFFINEQB bit matrix from its rows: rows[i] = the input bits whose parity is output bit i (the
  // instruction reads row i from byte 7 - i of the qword; ref: Intel SDM vol. 2, GF2P8AFFINEQB).
  static constexpr uint64_t BitMatrix(const uint8_t (&rows)[8]) {
    uint64_t m = 0;
    for (int i = 0; i < 8; ++i) m |= uint64_t(rows[i]) << (8 * (7 - i));
    return m;
  }
  // A normal E4M3 code s.eeee.mmm (e >= 1, not the NaN code s.1111.111) is the bf16 s | (e + 120) << 7 | m << 4.
  // Its low byte is bits 0-3 of the code moved to 4-7 (kLowRows); its high byte is s, then e + 120 >> 1 =
  // 0x3C + (e >> 1), where e >> 1 = code bits 4-6 = t is 0..7: 0x3C + t = t1 t0 in bits 0-1, NOT t2 in bits 2-5,
  // t2 in bit 6 (0x3C..0x3F for t < 4, 0x40..0x43 else), an affine map (kTopRows, XOR kTopBias).
  static constexpr uint8_t kLowRows[8] = {0, 0, 0, 0, 0x01, 0x02, 0x04, 0x08};
  static constexpr uint8_t kTopRows[8] = {0x10, 0x20, 0x40, 0x40, 0x40, 0x40, 0x40, 0x80};
  static constexpr int kTopBias = 0x3C;
  // Codes the affine map gets wrong: exponent 0 (zero and subnormals, m * 2^-9) and the NaN codes 0x7F, 0xFF.
  // kSpecialRows maps the 7 magnitude bits by a bijection (bit 3 flips bits 0-2 and 4-6) that sends 0..7 to
  // 0..7 and 0x7F to 8, so those codes, and only they, give bytes below kSpecialBelow.
  static constexpr uint8_t kSpecialRows[8] = {0x09, 0x0A, 0x0C, 0x08, 0x18, 0x28, 0x48, 0};
  static constexpr int kSpecialBelow = 9;
  struct State {
    // bf16 bits of each E4M3 magnitude (exact): high byte and low byte tables, two registers per table.
    __m512i top_lo, top_hi, low_lo, low_hi;
  };
  MINIMAKV_AMX_TARGET static State MakeState() {
    uint8_t top[kFp8TableEntries];
    uint8_t low[kFp8TableEntries];
    for (int code = 0; code < kFp8TableEntries; ++code) {
      const uint32_t bits = FloatBits(E4m3ToFloat(uint8_t(code)));
      top[code] = uint8_t(bits >> 24);
      low[code] = uint8_t(bits >> 16);
    }
    State s;
    s.top_lo = _mm512_loadu_si512(top);
    s.top_hi = _mm512_loadu_si512(top + 64);
    s.low_lo = _mm512_loadu_si512(low);
    s.low_hi = _mm512_loadu_si512(low + 64);
    return s;
  }
  MINIMAKV_AMX_TARGET static void Expand(const State& s, const uint8_t* codes, int step, __m512i (&out)[kZmm]) {
    Words(s, _mm512_loadu_si512(codes + 64 * step), out);
  }
  // The bf16 words of 64 codes c: out[0] the low 8 codes of each 128-bit lane, out[1] the high 8. Normal codes take
  // two GF2P8AFFINEQB (the bf16's two bytes) after one GF2P8AFFINEQB and one compare that look for the others; a
  // register holding any zero, subnormal or NaN code takes the tables (two VPERMI2B, the sign by VPTERNLOGD), which
  // give the same words for normal codes. Such codes are rare: the per-vector scale maps the largest |x| to 448, so
  // a coordinate is subnormal only below 2^-6 / 448 of it. Against the tables alone (4 shuffle-port uops for the
  // lookups) this moves the work to GF2P8AFFINEQB: the FP8 step took 0.95-0.98 of the time in the in-process A/B at
  // the Llama shape (docs/cpu-notes.md, session 14).
  MINIMAKV_AMX_TARGET static void Words(const State& s, __m512i c, __m512i (&out)[kZmm]) {
    const __m512i special = _mm512_gf2p8affine_epi64_epi8(c, _mm512_set1_epi64(int64_t(BitMatrix(kSpecialRows))), 0);
    __m512i top, low;
    if (__builtin_expect(_mm512_cmplt_epu8_mask(special, _mm512_set1_epi8(kSpecialBelow)) == 0, 1)) {
      low = _mm512_gf2p8affine_epi64_epi8(c, _mm512_set1_epi64(int64_t(BitMatrix(kLowRows))), 0);
      top = _mm512_gf2p8affine_epi64_epi8(c, _mm512_set1_epi64(int64_t(BitMatrix(kTopRows))), kTopBias);
    } else {
      top = _mm512_permutex2var_epi8(s.top_lo, c, s.top_hi);  // bit 7 of the index is ignored
      top = _mm512_ternarylogic_epi32(top, c, _mm512_set1_epi8(char(0x80)), 0xF8);  // top | (c & 0x80): the sign
      low = _mm512_permutex2var_epi8(s.low_lo, c, s.low_hi);
    }
    out[0] = _mm512_unpacklo_epi8(low, top);
    out[1] = _mm512_unpackhi_epi8(low, top);
  }
};

struct Tq3Amx {
  static constexpr KvFormat kFormat = KvFormat::kTq3;
  static constexpr int kZmm = 2;
  static constexpr int kStepCoords = 64;
  // Register z, word 8 L + k (128-bit lane L, k < 8) holds coordinate kWordBase[z][k] + kLaneStride[z][k] * L of
  // the step (see Expand). Register 0: nibble 4 (k % 2) + L of W0, W1, W2 of group 0 and W0 of group 1.
  // Register 1: nibble 4 k + L of group 1's W1 (k = 0, 1) and 4 (k - 6) + L of its W2 (k = 6, 7); the spill
  // coordinates 2 L, 2 L + 1 of group 0 (k = 2, 3: coordinates 24 + 2 L, 25 + 2 L) and of group 1 (k = 4, 5).
  static constexpr int kWordBase[kZmm][8] = {{0, 4, 8, 12, 16, 20, 32, 36}, {40, 44, 24, 25, 56, 57, 48, 52}};
  static constexpr int kLaneStride[kZmm][8] = {{1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 2, 2, 2, 2, 1, 1}};
  static constexpr int Coordinate(int e) {
    const int z = (e % 64) / 32, lane = (e % 32) / 8, k = e % 8;
    return e / 64 * 64 + kWordBase[z][k] + kLaneStride[z][k] * lane;
  }
  struct State {
    __m512i table;         // bf16 bits of the signed unit of index i % 8 (VPERMW reads 5 index bits: 4 copies)
    __m512i nibble_shift;  // word 8 L + k: 4 L bits
    __m512i gather;        // byte shuffle: W0, W1, W2 bytes of the spill coordinates into GF2P8AFFINEQB matrix rows
    __m512i spill_select;  // GF2P8AFFINEQB x operand: bit 3 or 7 of the matrix rows, in the spill words' low bytes
  };
  MINIMAKV_AMX_TARGET static State MakeState() {
    alignas(64) uint16_t units[kTileBf16];
    Tq3AmxUnits(units);
    alignas(64) uint16_t shifts[kTileBf16];
    for (int w = 0; w < kTileBf16; ++w) {
      units[w] = units[w % kTq3Indices];
      shifts[w] = uint16_t(4 * (w / 8));
    }
    // Qword q = 2 L + g (g: the group) of register 1 is the bit matrix of byte L of the group's W0, W1, W2 (rows
    // 7, 6, 5): that byte's bits 3 and 7 are the spill bits of coordinates 24 + 2 L and 25 + 2 L. Its spill words
    // are words 2, 3 (g = 0) or 0, 1 (g = 1) of the qword, whose low bytes select bit 3 and bit 7.
    constexpr int kSpillBitLow = 0x08, kSpillBitHigh = 0x80;
    alignas(64) uint8_t gather[64] = {};
    alignas(64) uint8_t select[64] = {};
    for (int q = 0; q < 8; ++q) {
      const int group = q % 2, byte = q / 2;
      for (int word = 0; word < 3; ++word) gather[8 * q + 7 - word] = uint8_t(12 * group + 4 * word + byte);
      const int first_spill_byte = group == 0 ? 4 : 0;
      select[8 * q + first_spill_byte] = kSpillBitLow;
      select[8 * q + first_spill_byte + 2] = kSpillBitHigh;
    }
    State s;
    s.table = _mm512_load_si512(units);
    s.nibble_shift = _mm512_load_si512(shifts);
    s.gather = _mm512_load_si512(gather);
    s.spill_select = _mm512_load_si512(select);
    return s;
  }
  // units[i]: bf16 bits of Tq3Centroid(i) * alpha, i.e. of +-kTq3MagnitudeUnits[i & 3] (exact, see the file comment).
  static void Tq3AmxUnits(uint16_t* units) {
    for (int i = 0; i < kTq3Indices; ++i) {
      const float unit = kTq3MagnitudeUnits[i & 3];
      units[i] = FloatToBf16((i & 4) ? -unit : unit);
    }
  }
  // 64 coordinates (two 12-byte groups of tq3_codec.h) in six vector operations and three loads. Register 0: the
  // step's bytes 0..15 broadcast to every 128-bit lane (a load); one VPSRLVW brings nibble L of each word to bits
  // 0-3 in lane L and one VPERMW looks the index up (bit 3, a spill bit, and bit 4 only pick one of the table's 4
  // copies). Register 1: the spill indices come from a bit transpose, as the former bit planes did: VPERMB puts
  // byte L of the group's W0, W1, W2 into rows 7, 6, 5 of an 8x8 bit matrix (one qword) and GF2P8AFFINEQB with
  // x = bit 3 (bit 7) gives bits 0, 1, 2 = bit 3 (7) of W0, W1, W2 (result bit k = parity(matrix byte 7 - k AND
  // x); ref: Intel SDM vol. 2, GF2P8AFFINEQB); a masked VPSRLVW writes the nibbles of group 1's W1, W2 (the qword
  // of bytes 16..23 broadcast, a load) into the other words; one VPERMW. Measured against the spill nibbles in
  // general registers merged by one VPBROADCASTQ (5 vector ops plus 14 scalar ALU ops and 6 loads): this one
  // took 0.84-0.95x the time (in-process A/B, one thread, TQ3 rows 1, 4 and 6).
  MINIMAKV_AMX_TARGET static void Expand(const State& s, const uint8_t* codes, int step, __m512i (&out)[kZmm]) {
    constexpr __mmask64 kStepBytes = (__mmask64(1) << 24) - 1;
    constexpr __mmask32 kNibbleWords = 0xC3C3C3C3u;  // register 1: words 0, 1 of even qwords, 2, 3 of odd ones
    const uint8_t* step_codes = codes + 24 * step;
    const __m512i low = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(step_codes)));
    const __m512i high = _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(step_codes + 16)));
    const __m512i raw = _mm512_maskz_loadu_epi8(kStepBytes, step_codes);
    const __m512i spill = _mm512_gf2p8affine_epi64_epi8(s.spill_select, _mm512_permutexvar_epi8(s.gather, raw), 0);
    out[0] = _mm512_permutexvar_epi16(_mm512_srlv_epi16(low, s.nibble_shift), s.table);
    out[1] = _mm512_permutexvar_epi16(_mm512_mask_srlv_epi16(spill, kNibbleWords, high, s.nibble_shift), s.table);
  }
};

// The VPERMB table of the AMX-INT8 TQ3 expansions (keys and values): byte i = the signed unit (tq3_codec.h) of
// index i % 8 as int8, i.e. +kTq3MagnitudeUnits[m] for index m, -kTq3MagnitudeUnits[m] for index 4 + m. VPERMB
// reads 6 index bits, so the table holds 8 copies.
MINIMAKV_AMX_TARGET inline __m512i Tq3Int8UnitTable() {
  alignas(64) int8_t table[64];
  for (int i = 0; i < 64; ++i) {
    const int index = i % kTq3Indices;
    const int unit = int(kTq3MagnitudeUnits[index & 3]);
    table[i] = int8_t((index & 4) ? -unit : unit);
  }
  return _mm512_load_si512(table);
}

// TQ3 keys as int8 tiles for the AMX-INT8 score variant (AttendAmxTq3Int8): a signed unit of tq3_codec.h
// (+-13, 40, 71, 114) is one exact int8 value, so one 64-byte register holds 64 coordinates (the K of one
// TDPBSSD; bf16 needs two registers and two TDPBF16PS). Expansion order inside a step of 64 coordinates: qword
// q = 4 g + L (group g, byte L of its words W0, W1, W2) holds the 8 coordinates whose bits lie in those three
// bytes, dword t (t = 0: low nibbles, 1: high nibbles) bytes 4 t + 0 .. 4 t + 3: the spill coordinate
// 32 g + 24 + 2 L + t, then the nibble coordinates 32 g + 8 i + 2 L + t of W2, W1, W0 (i = 2, 1, 0).
struct Tq3Int8Amx {
  static constexpr int kStepCoords = 64;
  static constexpr int kStepCodeBytes = 24;  // two 12-byte groups of tq3_codec.h
  static constexpr int Coordinate(int e) {
    const int within = e % kStepCoords, q = within / 8, g = q / 4, byte = q % 4, t = (within % 8) / 4;
    const int j = within % 4;  // 0: the spill coordinate, 1, 2, 3: the nibble of W2, W1, W0
    const int base = e / kStepCoords * kStepCoords + 32 * g + 2 * byte + t;
    return j == 0 ? base + 24 : base + 8 * (3 - j);
  }
  struct State {
    __m512i table;          // int8 signed unit of index i % 8 (VPERMB reads 6 index bits: 8 copies)
    __m512i gather;         // byte shuffle: qword q = 4 g + L gets byte L of the group's W0, W1, W2 in bytes 3, 2, 1
                            // and again in bytes 7, 6, 5
    __m512i spill_select;   // GF2P8AFFINEQB x operand: bit 3 (byte 0) or bit 7 (byte 4) of the matrix rows
    __m512i nibble_count;   // VPSRLVD counts: 0 / 4 per dword
  };
  MINIMAKV_AMX_TARGET static State MakeState() {
    alignas(64) uint8_t gather[64] = {};
    alignas(64) uint8_t select[64] = {};
    alignas(64) uint32_t count[16];
    constexpr int kWordBytes = 4, kGroupBytes = 12;
    constexpr int kSpillBitLow = 0x08, kSpillBitHigh = 0x80;  // bit 3 (nibble 2 L), bit 7 (nibble 2 L + 1)
    for (int q = 0; q < 8; ++q) {
      const int group = q / 4, byte = q % 4;
      for (int word = 0; word < 3; ++word) {  // rows 7, 6, 5 and 3, 2, 1 = W0, W1, W2
        const uint8_t at = uint8_t(kGroupBytes * group + kWordBytes * word + byte);
        gather[8 * q + 7 - word] = gather[8 * q + 3 - word] = at;
      }
      select[8 * q] = kSpillBitLow;
      select[8 * q + 4] = kSpillBitHigh;
    }
    for (int i = 0; i < 16; ++i) count[i] = uint32_t(4 * (i % 2));
    State s;
    s.table = Tq3Int8UnitTable();
    s.gather = _mm512_load_si512(gather);
    s.spill_select = _mm512_load_si512(select);
    s.nibble_count = _mm512_load_si512(count);
    return s;
  }
  // 64 coordinates in four vector operations and one load: VPERMB gathers each qword's three code bytes into
  // rows 7, 6, 5 and again 3, 2, 1 of an 8x8 bit matrix; GF2P8AFFINEQB with x = bit 3 (byte 0) or 7 (byte 4)
  // writes the spill index into bits 0-2 of byte 0 (rows 7, 6, 5) and bits 4-6 of byte 4 (rows 3, 2, 1; result
  // bit k = parity(matrix byte 7 - k AND x); ref: Intel SDM vol. 2, GF2P8AFFINEQB), merged by its mask; VPSRLVD
  // by 0 / 4 per dword leaves the low nibbles of bytes 1-3 in place and brings the high ones (and byte 4's index)
  // down in bytes 4-7 (bits 3-5 are neighbours, which the 8-fold table ignores); VPERMB looks the units up. Two
  // shuffles (VPERMB x 2) and two port-0 operations (GF2P8AFFINEQB, VPSRLVD); session 11's version wrote the
  // nibbles with a masked VPMULTISHIFTQB (three shuffles and one GF2P8AFFINEQB). In-process A/B at the Llama
  // shape, both with the constants in registers: 0.98 of the time (docs/BENCHMARKS.md section 3, session 12b).
  MINIMAKV_AMX_TARGET static __m512i Expand(const State& s, const uint8_t* codes, int step) {
    constexpr __mmask64 kStepBytes = (__mmask64(1) << kStepCodeBytes) - 1;
    constexpr __mmask64 kSpillBytes = 0x1111111111111111ull;  // bytes 0 and 4 of every qword
    const __m512i raw = _mm512_maskz_loadu_epi8(kStepBytes, codes + kStepCodeBytes * step);
    const __m512i matrix = _mm512_permutexvar_epi8(s.gather, raw);
    const __m512i index = _mm512_mask_gf2p8affine_epi64_epi8(matrix, kSpillBytes, s.spill_select, matrix, 0);
    return _mm512_permutexvar_epi8(_mm512_srlv_epi32(index, s.nibble_count), s.table);
  }
};

// The query of one row as a 24-bit fixed point for the int8 scores (the CUDA kernel's v9 / v15 scheme,
// kernels/cuda/cuda_attention.cu): Q_i = round(x_i * kQueryFixedMax / max |x|), split exactly into int8 digits
// Q = 65536 q2 + 256 q1 + q0 (q0, q1 in [-128, 127], |q2| <= 127 since |Q| <= kQueryFixedMax). TDPBSSD sums
// S_p = sum unit_i * q_p,i exactly in int32 (|S_p| <= 114 * 128 * 256 = 3.7e6 at d 256, so 256 S1 + S0 < 9.7e8
// fits int32 too), and x . unit = (max |x| / kQueryFixedMax) (65536 S2 + 256 S1 + S0) up to the fixed-point
// rounding (at most max |x| / (2 kQueryFixedMax) per coordinate, 6e-8 relative) and two fp32 roundings.
constexpr int kDigitBits = 8;
constexpr int kDigitBase = 1 << kDigitBits;
constexpr int kQueryFixedMax = (127 * kDigitBase + 127) * kDigitBase + 127;
constexpr int kInt8TileCoords = 64;  // int8 per tile row: the K of one TDPBSSD

template <typename Codec>
MINIMAKV_AMX_TARGET typename Codec::State MakeCodecState() {
  if constexpr (Codec::kFormat == KvFormat::kBf16) {
    return {};
  } else {
    return Codec::MakeState();
  }
}

template <typename Codec>
MINIMAKV_AMX_TARGET void LoadScales(const uint8_t* stored, int n, float* scales) {
  if constexpr (Codec::kFormat == KvFormat::kTq3) {
    // fp16 scales / alpha (one fp32 rounding), 16 at a time: the tiles hold units = alpha * centroid.
    const __m512 alpha = _mm512_set1_ps(kTq3UnitsPerMagnitude);
    for (int j = 0; j < n; j += kLanes) {
      const __mmask16 valid = n - j >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << (n - j)) - 1);
      const __m256i h = _mm256_maskz_loadu_epi16(valid, stored + 2 * size_t(j));
      _mm512_mask_storeu_ps(scales + j, valid, _mm512_div_ps(_mm512_cvtph_ps(h), alpha));
    }
  } else {
    std::memcpy(scales, stored, sizeof(float) * size_t(n));
  }
}

// Scratch of one task with up to kRowCapacity rows. Tasks of up to kNarrowTaskRows rows get the layout they had
// before 16-row tasks (the wide tasks' v_block sits at the end, untouched by them).
template <int kRowCapacity>
struct alignas(64) Workspace {
  static constexpr int kColumnBlocks = ColumnBlocksFor(kRowCapacity);
  // Query parts as B tiles: [32-coordinate chunk][column block][row pair][32 bf16] (VNNI pairs).
  uint16_t q_tiles[kMaxHeadDim / kTileBf16][kColumnBlocks][kTileRows][kTileBf16];
  // Expanded keys of one score tile: [key][expansion position]. Int8 keys (TQ3 scores on AMX-INT8) take half the
  // bytes, so two tiles fit: the second one starts at byte kKeyTile * kMaxHeadDim (ScoreBlock's tile pairs).
  uint16_t key_tiles[kKeyTile][kMaxHeadDim];
  // Weight parts as A tiles: [32-key sub-block][row block][row p*R + r][key].
  uint16_t p_tiles[kBlockKeys / kValueKeys][kColumnBlocks][kTileRows][kTileBf16];
  // Values of one 32-key sub-block and one step as B tiles: [16-coordinate chunk][key pair][32 bf16].
  uint16_t v_tiles[4][kTileRows][kTileBf16];
  float c_tiles[4][kTileRows][kTileCols];  // stored C tiles
  float transposed[kColumnBlocks * kTileCols][kTileCols];
  float acc[kRowCapacity][kMaxHeadDim];    // unnormalized outputs, value position order
  float scores[kRowCapacity][kBlockKeys];  // base-2 scores times the key scales
  float key_scale[kBlockKeys];
  float value_scale[kBlockKeys];
  float block_max[kRowCapacity][kLanes];  // per row, lane-wise maximum of this block's scaled scores
  float running_max[kRowCapacity];
  float running_sum[kRowCapacity];
  // Tasks of more than 32 weight rows (ValueBlockWide): the values of a whole block and one step as B tiles,
  // [32-key sub-block][16-coordinate chunk][key pair][32 bf16] (one unused sub-block in the narrow layout).
  uint16_t v_block[kColumnBlocks == 3 ? kBlockKeys / kValueKeys : 1][4][kTileRows][kTileBf16];
  // TQ3 scores on AMX-INT8 (AttendAmxTq3Int8): the query digits as B tiles, [64-coordinate chunk][column block]
  // [coordinate quad][64 int8] (column p*R + r: digit p of row r, 4 coordinates per dword), and per row the
  // weight of one fixed-point unit (max |x| / kQueryFixedMax). The keys' int8 tiles reuse key_tiles.
  int8_t q_digits[kMaxHeadDim / kInt8TileCoords][kColumnBlocks][kTileRows][kTileRowBytes];
  float digit_scale[kRowCapacity];
  // TQ3 values on AMX-INT8 (AttendAmxTq3Int8Values): the weights of a block as A tiles of unsigned digits,
  // [row block][row p*R + r][key] (digit p of row r's 24-bit fixed-point weight, key j at byte j); the values of
  // one step as B tiles, [16-coordinate chunk][key quad][64 int8] (keys 4k .. 4k + 3 of a coordinate per dword);
  // per row the weight of one fixed-point unit of this block, per key its value scale in fixed-point units.
  alignas(64) uint8_t w_digits[kColumnBlocks][kTileRows][kTileRowBytes];
  alignas(64) int8_t v_quads[kInt8TileCoords / kTileCols][kTileRows][kTileRowBytes];
  alignas(64) float value_fixed[kBlockKeys];
  float weight_unit[kRowCapacity];
};
// The workspace of a task of ROWS rows.
template <int ROWS>
using WorkspaceFor = Workspace<(ROWS <= kNarrowTaskRows ? kNarrowTaskRows : kMaxTaskRows)>;

// Value position e (accumulator order) -> expansion position, inside a step: register z, chunk half h, column n.
template <typename Codec>
constexpr int ValueExpansionPosition(int e) {
  const int base = e / Codec::kStepCoords * Codec::kStepCoords;
  const int within = e % Codec::kStepCoords;
  const int z = within / 32;
  const int h = (within % 32) / 16;
  const int n = within % 16;
  return base + 32 * z + 8 * (n / 4) + 4 * h + n % 4;
}

// The A tile of the score products for keys j0 .. j0 + keys_here - 1 of a block (keys_here <= kKeyTile): BF16
// rows of a whole tile straight from the page; else the keys expanded into `tile` (rows of kMaxHeadDim
// elements: bf16, or int8 units for kInt8), rows past keys_here zero. *a_base, *a_stride: where TILELOADD reads.
template <typename Codec, bool kInt8>
MINIMAKV_AMX_TARGET inline void PrepareKeyTile(const typename Codec::State& state, const Tq3Int8Amx::State& int8_state,
                                               const uint8_t* keys, size_t key_bytes, int j0, int keys_here,
                                               int head_dim, uint8_t* tile, const uint8_t** a_base,
                                               size_t* a_stride) {
  const size_t row_stride = (kInt8 ? sizeof(int8_t) : sizeof(uint16_t)) * kMaxHeadDim;
  if (Codec::kFormat == KvFormat::kBf16 && keys_here == kKeyTile) {
    *a_base = keys + size_t(j0) * key_bytes;  // BF16 rows are already A-tile rows
    *a_stride = key_bytes;
    return;
  }
  *a_base = tile;
  *a_stride = row_stride;
  const int steps = head_dim / Codec::kStepCoords;
  // A local copy of the int8 constants stays in registers: the uint8_t row stores below may alias int8_state, so
  // through the reference the compiler reloads its constants after every row (session 12b: 0.95 of the TQ3 time).
  const Tq3Int8Amx::State int8_constants = int8_state;
  for (int k = 0; k < kKeyTile; ++k) {
    uint8_t* row = tile + size_t(k) * row_stride;
    if (k < keys_here) {
      const uint8_t* key = keys + size_t(j0 + k) * key_bytes;
      if constexpr (kInt8) {
        for (int s = 0; s < steps; ++s) {
          _mm512_store_si512(row + kInt8TileCoords * s, Tq3Int8Amx::Expand(int8_constants, key, s));
        }
      } else {
        for (int s = 0; s < steps; ++s) {
          __m512i x[Codec::kZmm];
          Codec::Expand(state, key, s, x);
          for (int z = 0; z < Codec::kZmm; ++z) {
            _mm512_store_si512(row + sizeof(uint16_t) * size_t(s * Codec::kStepCoords + 32 * z), x[z]);
          }
        }
      }
    } else {
      const int row_bytes = int(kInt8 ? sizeof(int8_t) : sizeof(uint16_t)) * head_dim;
      for (int e = 0; e < row_bytes; e += kTileRowBytes) _mm512_store_si512(row + e, _mm512_setzero_si512());
    }
  }
}

// Scores of keys j0 .. j0 + keys_here - 1 from their C tiles, stored at ws.c_tiles[c0 + b] (column block b):
// C[key][column] -> transposed[column][key]; score = lo + mid + hi parts of the row (int8: the digit sums S2,
// S1, S0, int32 bits moved as floats), times the key scale; and the block maximum of each row (the first pass of
// the softmax, done here while the scores are in registers). Only the 3R columns in use are stored, so the
// compiler drops the shuffles of the others (R = 6: 2 of block 1's 16 columns). Lanes past n are stored but
// never read.
template <typename Codec, int ROWS, bool kInt8>
MINIMAKV_AMX_TARGET inline void FinishScoreTile(int c0, int j0, int keys_here, WorkspaceFor<ROWS>& ws) {
  constexpr int kColumnBlocks = ColumnBlocksFor(ROWS);
  for (int b = 0; b < kColumnBlocks; ++b) {
    __m512 rows[16], cols[16];
    for (int k = 0; k < 16; ++k) rows[k] = _mm512_load_ps(ws.c_tiles[c0 + b][k]);
    Transpose16(rows, cols);
    for (int c = 0; c < 16 && kTileCols * b + c < kQueryParts * ROWS; ++c) {
      _mm512_store_ps(ws.transposed[kTileCols * b + c], cols[c]);
    }
  }
  const __mmask16 valid = keys_here == kKeyTile ? __mmask16(0xFFFF) : __mmask16((1u << keys_here) - 1);
  for (int r = 0; r < ROWS; ++r) {
    __m512 s;
    if constexpr (kInt8) {
      // (65536 S2 + (256 S1 + S0)) times the row's fixed-point unit: 256 S1 + S0 exact in int32, 65536 S2
      // exact in fp32 (|S2| < 2^24), one rounding for the low part's conversion and one for the sum.
      const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ws.transposed[ROWS + r]), kDigitBits),
                                           _mm512_load_si512(ws.transposed[r]));
      const __m512 high = _mm512_cvtepi32_ps(_mm512_load_si512(ws.transposed[2 * ROWS + r]));
      s = _mm512_fmadd_ps(high, _mm512_set1_ps(float(kDigitBase * kDigitBase)), _mm512_cvtepi32_ps(low));
      s = _mm512_mul_ps(s, _mm512_set1_ps(ws.digit_scale[r]));
    } else {
      s = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(ws.transposed[2 * ROWS + r]), _mm512_load_ps(ws.transposed[ROWS + r])),
                        _mm512_load_ps(ws.transposed[r]));
    }
    if constexpr (Codec::kFormat != KvFormat::kBf16) s = _mm512_mul_ps(s, _mm512_maskz_loadu_ps(valid, ws.key_scale + j0));
    _mm512_storeu_ps(&ws.scores[r][j0], s);  // j0 + 16 <= kBlockKeys
    const __m512 m = _mm512_load_ps(ws.block_max[r]);
    _mm512_store_ps(ws.block_max[r], _mm512_mask_max_ps(m, valid, m, s));
  }
}

// Scores of keys [0, n) of a block: ws.scores[r][j] = q_r . k_j times the key scale, and ws.block_max.
// kInt8 (TQ3 only): keys as int8 units (Tq3Int8Amx), the query digits of ws.q_digits, TDPBSSD; int8_state is
// used only then (the bf16 codec state `state` only otherwise).
// Int8 scores with one column block (rows <= 5) take the keys two tiles at a time: both tiles' products share each
// query tile load, and the two C tiles accumulate independently (a tile's products otherwise form one chain).
// Session 11 (docs/BENCHMARKS.md section 3), in-process A/B at the Llama shape (TQ3 rows 4, d 128): 0.92 of the
// time (one thread, 16K, 24 rounds, twice), 0.925 (two threads, 32K, 40 rounds); the same pairs measured 1.03 for
// TQ3 at rows 6 d 256 (two column blocks: four C tiles), 1.07-1.10 for FP8 at rows 4 (bf16 keys, a 32-key
// expansion before the first product) and 1.00 for FP8 at rows 6, so only this case pairs.
template <typename Codec, int ROWS, bool kInt8 = false>
MINIMAKV_AMX_TARGET void ScoreBlock(const typename Codec::State& state, const Tq3Int8Amx::State& int8_state,
                                    const uint8_t* keys, size_t key_bytes, const uint8_t* values, int n,
                                    int head_dim, WorkspaceFor<ROWS>& ws) {
  static_assert(!kInt8 || Codec::kFormat == KvFormat::kTq3, "int8 scores are for TQ3 keys");
  constexpr int kColumnBlocks = ColumnBlocksFor(ROWS);
  const int chunks = head_dim / (kInt8 ? kInt8TileCoords : kTileBf16);
  constexpr bool kPairTiles = kInt8 && kColumnBlocks == 1;
  uint8_t* const tile_a = reinterpret_cast<uint8_t*>(ws.key_tiles);
  uint8_t* const tile_b = tile_a + size_t(kKeyTile) * kMaxHeadDim;  // int8 rows: kMaxHeadDim bytes each
  for (int r = 0; r < ROWS; ++r) _mm512_store_ps(ws.block_max[r], _mm512_set1_ps(-INFINITY));
  // The query's column blocks of coordinate chunk c: int8 digits (TDPBSSD) or bf16 parts (TDPBF16PS).
  const auto q_block = [&ws](int c, int b) -> const void* {
    if constexpr (kInt8) {
      return ws.q_digits[c][b];
    } else {
      return ws.q_tiles[c][b];
    }
  };
  for (int j0 = 0; j0 < n;) {
    const int keys_here = std::min(kKeyTile, n - j0);
    if (!kPairTiles || n - j0 <= kKeyTile) {
      // This tile's values are read by the value pass next: start fetching them now, a slice per chunk below.
      const size_t value_tile_bytes = size_t(keys_here) * key_bytes;
      const size_t value_slice_bytes = (value_tile_bytes + size_t(chunks) - 1) / size_t(chunks);
      const uint8_t* a_base;
      size_t a_stride;
      PrepareKeyTile<Codec, kInt8>(state, int8_state, keys, key_bytes, j0, keys_here, head_dim, tile_a, &a_base,
                                   &a_stride);
      // C tiles 0, 1, 3 (column blocks 0, 1, 2), A tile 2, B tiles 4, 5, 6.
      TileZero<0>();
      if constexpr (kColumnBlocks >= 2) TileZero<1>();
      if constexpr (kColumnBlocks == 3) TileZero<3>();
      for (int c = 0; c < chunks; ++c) {
        PrefetchL2Slice(values + size_t(j0) * key_bytes, value_tile_bytes, size_t(c), value_slice_bytes);
        const size_t offset = size_t(c) * kTileRowBytes;
        TileLoad<2>(a_base + offset, a_stride);
        TileLoad<4>(q_block(c, 0), kTileRowBytes);
        TileProduct<kInt8, 0, 2, 4>();
        if constexpr (kColumnBlocks >= 2) {
          TileLoad<5>(q_block(c, 1), kTileRowBytes);
          TileProduct<kInt8, 1, 2, 5>();
        }
        if constexpr (kColumnBlocks == 3) {
          TileLoad<6>(q_block(c, 2), kTileRowBytes);
          TileProduct<kInt8, 3, 2, 6>();
        }
      }
      TileStore<0>(ws.c_tiles[0], kTileCols * sizeof(float));
      if constexpr (kColumnBlocks >= 2) TileStore<1>(ws.c_tiles[1], kTileCols * sizeof(float));
      if constexpr (kColumnBlocks == 3) TileStore<3>(ws.c_tiles[2], kTileCols * sizeof(float));
      FinishScoreTile<Codec, ROWS, kInt8>(0, j0, keys_here, ws);
      j0 += kKeyTile;
      continue;
    }
    if constexpr (kPairTiles) {
      // Two tiles: keys j0 .. j0 + 15 (A tile 2, C tile 0) and the next up to 16 (A tile 3, C tile 1); B tile 4.
      const int keys_b = std::min(kKeyTile, n - j0 - kKeyTile);
      const size_t value_pair_bytes = size_t(keys_here + keys_b) * key_bytes;
      const size_t value_slice_bytes = (value_pair_bytes + size_t(chunks) - 1) / size_t(chunks);
      const uint8_t *a_base, *b_base;
      size_t a_stride, b_stride;
      PrepareKeyTile<Codec, kInt8>(state, int8_state, keys, key_bytes, j0, keys_here, head_dim, tile_a, &a_base,
                                   &a_stride);
      PrepareKeyTile<Codec, kInt8>(state, int8_state, keys, key_bytes, j0 + kKeyTile, keys_b, head_dim, tile_b,
                                   &b_base, &b_stride);
      TileZero<0>();
      TileZero<1>();
      for (int c = 0; c < chunks; ++c) {
        PrefetchL2Slice(values + size_t(j0) * key_bytes, value_pair_bytes, size_t(c), value_slice_bytes);
        const size_t offset = size_t(c) * kTileRowBytes;
        TileLoad<2>(a_base + offset, a_stride);
        TileLoad<4>(q_block(c, 0), kTileRowBytes);
        TileLoad<3>(b_base + offset, b_stride);
        TileProduct<kInt8, 0, 2, 4>();
        TileProduct<kInt8, 1, 3, 4>();
      }
      TileStore<0>(ws.c_tiles[0], kTileCols * sizeof(float));
      TileStore<1>(ws.c_tiles[1], kTileCols * sizeof(float));
      FinishScoreTile<Codec, ROWS, kInt8>(0, j0, keys_here, ws);
      FinishScoreTile<Codec, ROWS, kInt8>(1, j0 + kKeyTile, keys_b, ws);
      j0 += 2 * kKeyTile;
    }
  }
}

// Online-softmax update for one block (as in the AVX-512 kernels), writing the weights straight into the A
// tiles of the value products: row p*R + r of sub-block sb holds part p of row r's weight times the value
// scale (zero past n). The scores already carry the key scales and ws.block_max holds their maximum per row
// (ScoreBlock). The rescale factors of all rows come from one vector Exp2 instead of a libm call per row.
template <int ROWS>
MINIMAKV_AMX_TARGET void SoftmaxToWeightTiles(int n, int head_dim, bool has_scales, WorkspaceFor<ROWS>& ws) {
  alignas(64) float new_max[kLanes] = {};
  alignas(64) float rescale[kLanes];
  for (int r = 0; r < ROWS; ++r) new_max[r] = std::fmax(ws.running_max[r], _mm512_reduce_max_ps(_mm512_load_ps(ws.block_max[r])));
  constexpr __mmask16 kRows = __mmask16((1u << ROWS) - 1);
  // exp2(-inf) = 0 on the first block (Exp2 clamps its input at simd::kExp2MinInput, whose power underflows to 0).
  _mm512_store_ps(rescale, Exp2(_mm512_sub_ps(_mm512_maskz_loadu_ps(kRows, ws.running_max), _mm512_load_ps(new_max))));
  for (int r = 0; r < ROWS; ++r) {
    const float* s = ws.scores[r];
    ws.running_max[r] = new_max[r];
    const __m512 max_v = _mm512_set1_ps(new_max[r]);
    __m512 sum = _mm512_setzero_ps();
    for (int sb = 0; sb * kValueKeys < n; ++sb) {
      __m512 halves[2][kQueryParts];
      for (int h = 0; h < 2; ++h) {
        const int j = sb * kValueKeys + h * kLanes;
        const __mmask16 valid = __mmask16((1u << std::clamp(n - j, 0, kLanes)) - 1);
        // Lanes past n: exp2 of (0 - max) is finite and then zeroed; j stays inside the score row.
        const int at = std::min(j, kBlockKeys - kLanes);
        const __m512 p = _mm512_maskz_mov_ps(valid, Exp2(_mm512_sub_ps(_mm512_maskz_load_ps(valid, s + at), max_v)));
        sum = _mm512_add_ps(sum, p);
        SplitThree(has_scales ? _mm512_mul_ps(p, _mm512_maskz_load_ps(valid, ws.value_scale + at)) : p, halves[h]);
      }
      for (int part = 0; part < kQueryParts; ++part) {
        const int m = part * ROWS + r;
        _mm512_store_si512(ws.p_tiles[sb][m / kTileRows][m % kTileRows], PackTileBf16(halves[0][part], halves[1][part]));
      }
    }
    ws.running_sum[r] = ws.running_sum[r] * rescale[r] + _mm512_reduce_add_ps(sum);
    RescaleRow(ws.acc[r], head_dim, rescale[r]);
  }
}

// acc[r][position .. + 15] += the three query parts' products of row r: C row m = part * ROWS + r, held in C tile
// tile_of(m) (the passes lay their row blocks and chunks out differently), row m % kTileRows; lo + mid + hi order.
template <int ROWS, typename TileOf>
MINIMAKV_AMX_TARGET inline void AddQueryParts(WorkspaceFor<ROWS>& ws, int position, TileOf tile_of) {
  for (int r = 0; r < ROWS; ++r) {
    const float* part_rows[kQueryParts];
    for (int p = 0; p < kQueryParts; ++p) {
      const int m = p * ROWS + r;
      part_rows[p] = ws.c_tiles[tile_of(m)][m % kTileRows];
    }
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(part_rows[2]), _mm512_load_ps(part_rows[1])),
                                     _mm512_load_ps(part_rows[0]));
    _mm512_store_ps(&ws.acc[r][position], _mm512_add_ps(_mm512_load_ps(&ws.acc[r][position]), sum));
  }
}

// Keys ka and ka + 1 of a value block expanded for step `step` (a key at or past n expands to zeros), and the
// next block's keys prefetched two lines per pair, spread over the pairs so the prefetches do not queue up.
template <typename Codec>
MINIMAKV_AMX_TARGET inline void ExpandValuePair(const typename Codec::State& state, const uint8_t* values,
                                                size_t value_bytes, int n, int ka, int step, bool prefetch,
                                                const uint8_t* next_keys, size_t next_key_bytes,
                                                __m512i (&xa)[Codec::kZmm], __m512i (&xb)[Codec::kZmm]) {
  if (prefetch && next_keys != nullptr && size_t(ka) * value_bytes < next_key_bytes) {
    PrefetchL2(next_keys + size_t(ka) * value_bytes, std::min(2 * value_bytes, next_key_bytes - size_t(ka) * value_bytes));
  }
  const __m512i zero = _mm512_setzero_si512();
  if (ka < n) {
    Codec::Expand(state, values + size_t(ka) * value_bytes, step, xa);
  } else {
    for (auto& x : xa) x = zero;
  }
  if (ka + 1 < n) {
    Codec::Expand(state, values + size_t(ka + 1) * value_bytes, step, xb);
  } else {
    for (auto& x : xb) x = zero;
  }
}

// B-tile rows (VNNI pairs) of keys ka and ka + 1 for the registers [Z0, Z0 + ZN) of step `step`: rows[2 (z - Z0)]
// and rows[2 (z - Z0) + 1] hold, in dword 4 L + t, the two keys' values at the coordinates of words t and 4 + t of
// lane L of register z. Generic codecs expand both keys and interleave their words (2 unpacks per register).
// FP8 interleaves the two keys' code bytes first (one unpack per register) and converts the pairs directly
// (Fp8Amx::Words): the same rows, bit for bit, in 7 instead of 8 vector operations per key and 64 coordinates, and
// a pass over one register of a step (two row blocks) converts only its 32 codes per key.
template <typename Codec, int Z0, int ZN>
MINIMAKV_AMX_TARGET inline void ValuePairRows(const typename Codec::State& state, const uint8_t* values,
                                              size_t value_bytes, int n, int ka, int step, bool prefetch,
                                              const uint8_t* next_keys, size_t next_key_bytes,
                                              __m512i (&rows)[2 * ZN]) {
  if constexpr (Codec::kFormat == KvFormat::kFp8) {
    if (prefetch && next_keys != nullptr && size_t(ka) * value_bytes < next_key_bytes) {
      PrefetchL2(next_keys + size_t(ka) * value_bytes, std::min(2 * value_bytes, next_key_bytes - size_t(ka) * value_bytes));
    }
    // A key at or past n reads as code 0, whose bf16 is +0 (what the generic path's zero expansion gives).
    const __m512i zero = _mm512_setzero_si512();
    const __m512i ca = ka < n ? _mm512_loadu_si512(values + size_t(ka) * value_bytes + 64 * step) : zero;
    const __m512i cb = ka + 1 < n ? _mm512_loadu_si512(values + size_t(ka + 1) * value_bytes + 64 * step) : zero;
    for (int z = Z0; z < Z0 + ZN; ++z) {
      // Lane L: bytes (a, b) of codes 16 L + 8 z + k, k = 0..7; Words gives k = 0..3 and 4..7 as (a, b) pairs.
      const __m512i pairs = z == 0 ? _mm512_unpacklo_epi8(ca, cb) : _mm512_unpackhi_epi8(ca, cb);
      __m512i words[2];
      Codec::Words(state, pairs, words);
      rows[2 * (z - Z0)] = words[0];
      rows[2 * (z - Z0) + 1] = words[1];
    }
  } else {
    __m512i xa[Codec::kZmm];
    __m512i xb[Codec::kZmm];
    ExpandValuePair<Codec>(state, values, value_bytes, n, ka, step, prefetch, next_keys, next_key_bytes, xa, xb);
    for (int z = Z0; z < Z0 + ZN; ++z) {
      rows[2 * (z - Z0)] = _mm512_unpacklo_epi16(xa[z], xb[z]);
      rows[2 * (z - Z0) + 1] = _mm512_unpackhi_epi16(xa[z], xb[z]);
    }
  }
}

// One value pass: coordinates of registers [Z0, Z0 + ZN) of step `step`, all keys of the block, rows in MB
// row blocks. C tiles: 0, 1 (chunks of register Z0, row block 0), 2, 3 (the next register, or row block 1).
template <typename Codec, int ROWS, int MB, int Z0, int ZN>
MINIMAKV_AMX_TARGET void ValuePass(const typename Codec::State& state, const uint8_t* values, size_t value_bytes,
                                   int n, int step, const uint8_t* next_keys, size_t next_key_bytes, WorkspaceFor<ROWS>& ws) {
  static_assert(2 * ZN * MB <= 4, "four C tiles");
  TileZero<0>();
  TileZero<1>();
  if constexpr (ZN * MB == 2) {
    TileZero<2>();
    TileZero<3>();
  }
  for (int sb = 0; sb * kValueKeys < n; ++sb) {
    for (int i = 0; i < kTileRows; ++i) {
      __m512i rows[2 * ZN];
      ValuePairRows<Codec, Z0, ZN>(state, values, value_bytes, n, sb * kValueKeys + 2 * i, step, true, next_keys,
                                   next_key_bytes, rows);
      for (int t = 0; t < 2 * ZN; ++t) _mm512_store_si512(ws.v_tiles[t][i], rows[t]);
    }
    TileLoad<4>(ws.p_tiles[sb][0], kTileRowBytes);
    if constexpr (MB == 2) TileLoad<5>(ws.p_tiles[sb][1], kTileRowBytes);
    TileLoad<6>(ws.v_tiles[0], kTileRowBytes);
    TileLoad<7>(ws.v_tiles[1], kTileRowBytes);
    TileDot<0, 4, 6>();
    TileDot<1, 4, 7>();
    if constexpr (MB == 2) {
      TileDot<2, 5, 6>();
      TileDot<3, 5, 7>();
    } else if constexpr (ZN == 2) {
      TileLoad<6>(ws.v_tiles[2], kTileRowBytes);
      TileLoad<7>(ws.v_tiles[3], kTileRowBytes);
      TileDot<2, 4, 6>();
      TileDot<3, 4, 7>();
    }
  }
  TileStore<0>(ws.c_tiles[0], kTileCols * sizeof(float));
  TileStore<1>(ws.c_tiles[1], kTileCols * sizeof(float));
  if constexpr (ZN * MB == 2) {
    TileStore<2>(ws.c_tiles[2], kTileCols * sizeof(float));
    TileStore<3>(ws.c_tiles[3], kTileCols * sizeof(float));
  }
  // acc[r] += lo + mid + hi rows of each 16-coordinate chunk.
  for (int chunk = 0; chunk < 2 * ZN; ++chunk) {
    AddQueryParts<ROWS>(ws, step * Codec::kStepCoords + 32 * Z0 + 16 * chunk,
                        [&](int m) { return MB == 2 ? chunk + 2 * (m / kTileRows) : chunk; });
  }
}

// Tasks of 11-16 rows: 3R weight rows are three A tiles, and with two C tiles per register and row block (as
// ValuePass) the products would need 6 C + 3 A + 2 B tiles of the 8. Instead every value of the block is expanded
// once per step into ws.v_block (all sub-blocks and chunks, 8 KiB of L1), then each 16-coordinate chunk runs
// over the sub-blocks with C tiles 0-2 (row blocks), A tiles 3-5 (weights), B tile 6 (values): 7 tiles, and
// each value is still expanded once per step (ValuePass with two row blocks expands a step twice).
template <typename Codec, int ROWS>
MINIMAKV_AMX_TARGET void ValueBlockWide(const typename Codec::State& state, const uint8_t* values, size_t value_bytes,
                                        int n, int head_dim, const uint8_t* next_keys, size_t next_key_bytes,
                                        WorkspaceFor<ROWS>& ws) {
  constexpr int kRowBlocks = (kQueryParts * ROWS + kTileRows - 1) / kTileRows;
  static_assert(kRowBlocks == 3, "the wide pass is for three row blocks");
  constexpr int kChunks = 2 * Codec::kZmm;  // 16-coordinate chunks per step
  const int steps = head_dim / Codec::kStepCoords;
  const int sub_blocks = (n + kValueKeys - 1) / kValueKeys;
  for (int step = 0; step < steps; ++step) {
    for (int sb = 0; sb < sub_blocks; ++sb) {
      for (int i = 0; i < kTileRows; ++i) {
        __m512i rows[2 * Codec::kZmm];
        // The next block's keys are prefetched during the first step only (ValuePass: once per pass).
        ValuePairRows<Codec, 0, Codec::kZmm>(state, values, value_bytes, n, sb * kValueKeys + 2 * i, step, step == 0,
                                             next_keys, next_key_bytes, rows);
        for (int t = 0; t < 2 * Codec::kZmm; ++t) _mm512_store_si512(ws.v_block[sb][t][i], rows[t]);
      }
    }
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      TileZero<0>();
      TileZero<1>();
      TileZero<2>();
      for (int sb = 0; sb < sub_blocks; ++sb) {
        TileLoad<6>(ws.v_block[sb][chunk], kTileRowBytes);
        TileLoad<3>(ws.p_tiles[sb][0], kTileRowBytes);
        TileLoad<4>(ws.p_tiles[sb][1], kTileRowBytes);
        TileLoad<5>(ws.p_tiles[sb][2], kTileRowBytes);
        TileDot<0, 3, 6>();
        TileDot<1, 4, 6>();
        TileDot<2, 5, 6>();
      }
      TileStore<0>(ws.c_tiles[0], kTileCols * sizeof(float));
      TileStore<1>(ws.c_tiles[1], kTileCols * sizeof(float));
      TileStore<2>(ws.c_tiles[2], kTileCols * sizeof(float));
      // acc[r] += lo + mid + hi rows; chunk 2 z + h holds coordinates 32 z + 16 h of the step (as ValuePass).
      AddQueryParts<ROWS>(ws, step * Codec::kStepCoords + 16 * chunk, [](int m) { return m / kTileRows; });
    }
  }
}

template <typename Codec, int ROWS>
MINIMAKV_AMX_TARGET void ValueBlock(const typename Codec::State& state, const uint8_t* values, size_t value_bytes,
                                    int n, int head_dim, const uint8_t* next_keys, size_t next_key_bytes,
                                    WorkspaceFor<ROWS>& ws) {
  constexpr int kRowBlocks = (kQueryParts * ROWS + kTileRows - 1) / kTileRows;
  if constexpr (kRowBlocks == 3) {
    ValueBlockWide<Codec, ROWS>(state, values, value_bytes, n, head_dim, next_keys, next_key_bytes, ws);
  } else {
    const int steps = head_dim / Codec::kStepCoords;
    for (int step = 0; step < steps; ++step) {
      const uint8_t* prefetch = step == 0 ? next_keys : nullptr;
      if constexpr (Codec::kZmm == 1) {
        ValuePass<Codec, ROWS, kRowBlocks, 0, 1>(state, values, value_bytes, n, step, prefetch, next_key_bytes, ws);
      } else if constexpr (kRowBlocks == 1) {
        ValuePass<Codec, ROWS, 1, 0, 2>(state, values, value_bytes, n, step, prefetch, next_key_bytes, ws);
      } else {  // two row blocks and two registers per step: one pass per register (the step is expanded twice)
        ValuePass<Codec, ROWS, 2, 0, 1>(state, values, value_bytes, n, step, prefetch, next_key_bytes, ws);
        ValuePass<Codec, ROWS, 2, 1, 1>(state, values, value_bytes, n, step, nullptr, 0, ws);
      }
    }
  }
}

// ---- TQ3 values on AMX-INT8 (AttendAmxTq3Int8Values) ----
// The value units (+-13, 40, 71, 114) are exact int8 (as for the scores), so a value tile holds 64 keys x 16
// coordinates (VNNI quads) and one TDPBUSD multiplies a whole 64-key block: half the tile products of the bf16
// pass (32 keys each), and four values expand together into their B-tile rows (Tq3QuadAmx: 15 vector operations
// per four keys and 64 coordinates, 9 of them shuffles, one store per key; bf16: 6 plus 2 unpacks per key, two
// stores). The weights become a fixed point per row and block:
// W_j = round(exp2(s_j - m_b) * vs_j * kWeightFixedMax / max_j vs_j) <= kWeightFixedMax (m_b the row's block
// maximum, vs_j the value scale / alpha), three unsigned digits W = 65536 w2 + 256 w1 + w0. TDPBUSD sums the
// digit products exactly in int32 (|sum| <= 64 * 255 * 114 = 1.9e6 per block and digit, so 256 S1 + S0 and
// 65536 S2 are exact) and the row's accumulator gains (65536 S2 + 256 S1 + S0) * exp2(m_b - m) * max vs /
// kWeightFixedMax. Error: the weight rounding, at most half a unit = 3e-8 of the block's largest weight per key
// (the bf16 pass splits each weight exactly); the denominator sums the unrounded fp32 weights as before.
constexpr int kWeightFixedMax = (1 << 24) - 1;  // three unsigned 8-bit digits
constexpr int kValueChunks = kInt8TileCoords / kTileCols;  // 16-coordinate B tiles per 64-coordinate step

// TQ3 values of four keys straight into VNNI-quad B-tile rows (the int8 value pass): instead of expanding each key
// (Tq3Int8Amx::Expand, 4 operations) and interleaving four keys by two rounds of unpacks (8 per quad), the
// gathers take bytes of all four keys at once. The quad's codes of one step sit in two registers (keys a, b at
// bytes 0..23 and 24..47 of the first, c, d likewise in the second: four masked loads). Register i = 0, 1, 2
// (word Wi of both groups): VPERMI2B puts byte L of Wi of group g of the four keys into bytes 0..3 of qword
// q = 4 g + L and again into bytes 4..7; VPSRLVD by 0 / 4 per dword leaves the low nibbles in bytes 0..3 and
// brings the high ones down in bytes 4..7 (dword t = the four keys' coordinate 32 g + 8 i + 2 L + t: VPERMB reads
// index bits 0-5 and the 8-fold table ignores bits 3-5, the neighbours); VPERMB looks the units up. Register 3
// (the spill coordinates): two VPERMI2B build per qword the bit matrix of byte L of W0, W1, W2 of keys a, d (rows
// 7-5, 4-2) and of keys b, c; GF2P8AFFINEQB with x = bit 3 (dword 0) or bit 7 (dword 1) gives idx_a | idx_d << 3
// in bytes 0 and 3 of each dword and, merged by its mask, idx_b | idx_c << 3 in bytes 1 and 2; VPSRLVW by 0 / 3
// per word leaves idx_a, idx_b in the low bits of bytes 0, 1 and brings idx_c, idx_d down in bytes 2, 3; VPERMB
// looks up. Per quad and step 15 vector operations: 5 VPERMI2B (two uops each here), 4 VPERMB, 2 GF2P8AFFINEQB,
// 4 shifts (VPSRLVD x 3, VPSRLVW): 9 shuffle-port operations. Session 9's version split the nibbles and the spill
// pairs with VPMULTISHIFTQB (13 shuffle-port operations, 2 GF2P8AFFINEQB; 0.96-0.99x the time of expand +
// unpack there); the shifts run on the other vector port (port 0: a VPSRLVD / VPSRLVW and a VPERMB issue in the
// same cycle, a VPMULTISHIFTQB and a VPERMB do not; one-core test, session 12b). Same tile rows, so the same bits
// out; in-process A/B at the Llama shape (one thread, 16K, 300 rounds): 0.99 of the time with the constants in
// registers (docs/BENCHMARKS.md section 3, session 12b). Removing the value expansion altogether (a wrong kernel)
// saved 20-25% (sessions 9 and 12): not the shuffle count alone sets its cost.
struct Tq3QuadAmx {
  static constexpr int kRegisters = 4;  // B-tile rows per quad and step: 16 coordinates x 4 keys each
  // Coordinate of column n of register j in a step (see above): q = n / 2 = 4 g + L, t = n % 2.
  static constexpr int Coordinate(int e) {
    const int base = e / kInt8TileCoords * kInt8TileCoords, j = (e % kInt8TileCoords) / kTileCols;
    const int n = e % kTileCols, q = n / 2, t = n % 2, g = q / 4, byte = q % 4;
    return base + 32 * g + 8 * j + 2 * byte + t;  // j = 3: 24 + 2 L + t, the spill coordinates
  }
  struct State {
    __m512i gather[3];      // VPERMI2B indices of the nibble registers (word W0, W1, W2): each byte twice
    __m512i nibble_count;   // VPSRLVD counts: 0 (dword 0 of a qword: low nibbles), 4 (dword 1: high nibbles)
    __m512i spill_ad, spill_bc;  // VPERMI2B indices of the spill bit matrices of keys a, d and b, c
    __m512i spill_select;   // GF2P8AFFINEQB x: bit 3 in dword 0, bit 7 in dword 1 of each qword
    __m512i spill_count;    // VPSRLVW counts: 0, 3 per word (idx_a, idx_b low; idx_c, idx_d three bits up)
    __m512i table;          // int8 signed unit of index i % 8
  };
  static constexpr int kKeyBytes = 24;  // one key's codes of one step; keys b, d at byte 24 of their register
  static constexpr int kSecond = 64;    // VPERMI2B index of the second register's byte 0
  MINIMAKV_AMX_TARGET static State MakeState() {
    constexpr int kWordBytes = 4, kGroupBytes = 12;
    const int key_base[4] = {0, kKeyBytes, kSecond, kSecond + kKeyBytes};
    alignas(64) uint8_t gather[3][64] = {};
    alignas(64) uint8_t ad[64] = {}, bc[64] = {}, select[64];
    alignas(64) uint32_t nibble_count[16];
    alignas(64) uint16_t spill_count[32];
    for (int q = 0; q < 8; ++q) {
      const int group = q / 4, byte = q % 4;
      for (int w = 0; w < 3; ++w) {
        const int offset = kGroupBytes * group + kWordBytes * w + byte;
        for (int k = 0; k < 4; ++k) gather[w][8 * q + k] = gather[w][8 * q + 4 + k] = uint8_t(key_base[k] + offset);
        // Matrix rows 7, 6, 5 (result bits 0, 1, 2): W0, W1, W2 of key a (b); rows 4, 3, 2: of key d (c).
        ad[8 * q + 7 - w] = uint8_t(key_base[0] + offset);
        ad[8 * q + 4 - w] = uint8_t(key_base[3] + offset);
        bc[8 * q + 7 - w] = uint8_t(key_base[1] + offset);
        bc[8 * q + 4 - w] = uint8_t(key_base[2] + offset);
      }
      constexpr int kSpillBitLow = 0x08, kSpillBitHigh = 0x80;  // bit 3 (t = 0), bit 7 (t = 1) of byte L
      for (int b = 0; b < 8; ++b) select[8 * q + b] = b < 4 ? kSpillBitLow : kSpillBitHigh;
    }
    for (int i = 0; i < 16; ++i) nibble_count[i] = uint32_t(4 * (i % 2));
    for (int i = 0; i < 32; ++i) spill_count[i] = uint16_t(3 * (i % 2));
    State s;
    for (int w = 0; w < 3; ++w) s.gather[w] = _mm512_load_si512(gather[w]);
    s.nibble_count = _mm512_load_si512(nibble_count);
    s.spill_ad = _mm512_load_si512(ad);
    s.spill_bc = _mm512_load_si512(bc);
    s.spill_select = _mm512_load_si512(select);
    s.spill_count = _mm512_load_si512(spill_count);
    s.table = Tq3Int8UnitTable();
    return s;
  }
  // Keys 4 kq .. 4 kq + 3 of a block (those at or past n are not read: their units are garbage, their weight
  // digits zero) for step `step`: u[j] = B-tile row kq of chunk j.
  MINIMAKV_AMX_TARGET static void Expand(const State& s, const uint8_t* values, size_t value_bytes, int n, int kq,
                                         int step, __m512i (&u)[kRegisters]) {
    constexpr __mmask64 kFirst = (__mmask64(1) << kKeyBytes) - 1;
    constexpr __mmask64 kSecondKey = kFirst << kKeyBytes;
    const int key = 4 * kq;
    const uint8_t* at = values + size_t(key) * value_bytes + size_t(kKeyBytes) * size_t(step);
    // The second key of a register is loaded to byte 24: from its address - 24 >= the first key's address.
    __m512i r0 = _mm512_maskz_loadu_epi8(kFirst, at);
    if (key + 1 < n) r0 = _mm512_mask_loadu_epi8(r0, kSecondKey, at + value_bytes - kKeyBytes);
    __m512i r1 = _mm512_setzero_si512();
    if (key + 2 < n) r1 = _mm512_maskz_loadu_epi8(kFirst, at + 2 * value_bytes);
    if (key + 3 < n) r1 = _mm512_mask_loadu_epi8(r1, kSecondKey, at + 3 * value_bytes - kKeyBytes);
    for (int w = 0; w < 3; ++w) {
      const __m512i bytes = _mm512_permutex2var_epi8(r0, s.gather[w], r1);
      u[w] = _mm512_permutexvar_epi8(_mm512_srlv_epi32(bytes, s.nibble_count), s.table);
    }
    constexpr __mmask64 kBcBytes = 0x6666666666666666ull;  // bytes 1 and 2 of each dword
    const __m512i ad = _mm512_gf2p8affine_epi64_epi8(s.spill_select, _mm512_permutex2var_epi8(r0, s.spill_ad, r1), 0);
    const __m512i pairs =
        _mm512_mask_gf2p8affine_epi64_epi8(ad, kBcBytes, s.spill_select, _mm512_permutex2var_epi8(r0, s.spill_bc, r1), 0);
    u[3] = _mm512_permutexvar_epi8(_mm512_srlv_epi16(pairs, s.spill_count), s.table);
  }
};

// Online-softmax update for one block with the weights as fixed-point digits in ws.w_digits (see above); the
// rescale of the running sums and accumulators as SoftmaxToWeightTiles.
template <int ROWS>
MINIMAKV_AMX_TARGET void SoftmaxToWeightDigits(int n, int head_dim, WorkspaceFor<ROWS>& ws) {
  constexpr int kGroups = kBlockKeys / kLanes;
  // Value scales in fixed-point units of the block's largest one (TQ3 scales are norms: >= 0).
  __m512 vs_max_v = _mm512_setzero_ps();
  for (int g = 0; g * kLanes < n; ++g) {
    const __mmask16 valid = __mmask16((1u << std::min(n - g * kLanes, kLanes)) - 1);
    vs_max_v = _mm512_max_ps(vs_max_v, _mm512_maskz_load_ps(valid, ws.value_scale + g * kLanes));
  }
  const float vs_max = _mm512_reduce_max_ps(vs_max_v);
  const float to_fixed = vs_max > 0.0f ? float(kWeightFixedMax) / vs_max : 0.0f;
  for (int g = 0; g < kGroups; ++g) {
    const __mmask16 valid = __mmask16((1u << std::clamp(n - g * kLanes, 0, kLanes)) - 1);
    const __m512 fixed = _mm512_mul_ps(_mm512_maskz_load_ps(valid, ws.value_scale + g * kLanes), _mm512_set1_ps(to_fixed));
    _mm512_store_ps(ws.value_fixed + g * kLanes, _mm512_min_ps(fixed, _mm512_set1_ps(float(kWeightFixedMax))));
  }
  alignas(64) float block_max[kLanes] = {};
  alignas(64) float new_max[kLanes] = {};
  alignas(64) float rescale[kLanes];
  alignas(64) float block_weight[kLanes];
  for (int r = 0; r < ROWS; ++r) {
    block_max[r] = _mm512_reduce_max_ps(_mm512_load_ps(ws.block_max[r]));
    new_max[r] = std::fmax(ws.running_max[r], block_max[r]);
  }
  constexpr __mmask16 kRows = __mmask16((1u << ROWS) - 1);
  const __m512 new_max_v = _mm512_load_ps(new_max);
  _mm512_store_ps(rescale, Exp2(_mm512_sub_ps(_mm512_maskz_loadu_ps(kRows, ws.running_max), new_max_v)));
  _mm512_store_ps(block_weight, Exp2(_mm512_sub_ps(_mm512_load_ps(block_max), new_max_v)));
  // Digit p of the keys of w[0], w[1] (keys 0..31): bytes 0..31 digit 0 and 32..63 digit 1 (kLowDigits), or digit
  // 2 in both halves (kHighDigit); VPERMT2B index bit 6 picks w[1]. The same indices serve w[2], w[3].
  alignas(64) uint8_t low_digits[kTileRowBytes];
  alignas(64) uint8_t high_digit[kTileRowBytes];
  for (int b = 0; b < kTileRowBytes; ++b) {
    const int key = b % 32;
    const int source = (key / kLanes) * kTileRowBytes + (key % kLanes) * 4;
    low_digits[b] = uint8_t(source + b / 32);
    high_digit[b] = uint8_t(source + 2);
  }
  const __m512i low_index = _mm512_load_si512(low_digits);
  const __m512i high_index = _mm512_load_si512(high_digit);
  constexpr int kLowHalves = _MM_SHUFFLE(1, 0, 1, 0), kHighHalves = _MM_SHUFFLE(3, 2, 3, 2);
  for (int r = 0; r < ROWS; ++r) {
    const float* s = ws.scores[r];
    ws.running_max[r] = new_max[r];
    const __m512 max_v = _mm512_set1_ps(block_max[r]);
    __m512 sum = _mm512_setzero_ps();
    __m512i w[kGroups];
    for (int g = 0; g < kGroups; ++g) {
      const int j = g * kLanes;
      if (j >= n) {
        w[g] = _mm512_setzero_si512();
        continue;
      }
      const __mmask16 valid = __mmask16((1u << std::min(n - j, kLanes)) - 1);
      const __m512 p = _mm512_maskz_mov_ps(valid, Exp2(_mm512_sub_ps(_mm512_maskz_load_ps(valid, s + j), max_v)));
      sum = _mm512_add_ps(sum, p);
      w[g] = _mm512_cvtps_epi32(_mm512_mul_ps(p, _mm512_load_ps(ws.value_fixed + j)));  // round to nearest
    }
    const __m512i low01 = _mm512_permutex2var_epi8(w[0], low_index, w[1]);
    const __m512i low23 = _mm512_permutex2var_epi8(w[2], low_index, w[3]);
    const __m512i high01 = _mm512_permutex2var_epi8(w[0], high_index, w[1]);
    const __m512i high23 = _mm512_permutex2var_epi8(w[2], high_index, w[3]);
    const __m512i digits[kQueryParts] = {_mm512_shuffle_i64x2(low01, low23, kLowHalves),
                                         _mm512_shuffle_i64x2(low01, low23, kHighHalves),
                                         _mm512_shuffle_i64x2(high01, high23, kLowHalves)};
    for (int p = 0; p < kQueryParts; ++p) {
      const int m = p * ROWS + r;
      _mm512_store_si512(ws.w_digits[m / kTileRows][m % kTileRows], digits[p]);
    }
    ws.weight_unit[r] = block_weight[r] * (vs_max / float(kWeightFixedMax));
    ws.running_sum[r] = ws.running_sum[r] * rescale[r] + block_weight[r] * _mm512_reduce_add_ps(sum);
    RescaleRow(ws.acc[r], head_dim, rescale[r]);
  }
}

// acc[r][position .. + 15] += row r's digit sums of one chunk times its fixed-point unit: C rows p * R + r in C
// tile tile_of(row block), row (p * R + r) % 16, int32 bits in ws.c_tiles.
template <int ROWS, typename TileOf>
MINIMAKV_AMX_TARGET inline void AddWeightDigits(WorkspaceFor<ROWS>& ws, int position, TileOf tile_of) {
  for (int r = 0; r < ROWS; ++r) {
    __m512i part[kQueryParts];
    for (int p = 0; p < kQueryParts; ++p) {
      const int m = p * ROWS + r;
      part[p] = _mm512_load_si512(ws.c_tiles[tile_of(m / kTileRows)][m % kTileRows]);
    }
    const __m512i low = _mm512_add_epi32(_mm512_slli_epi32(part[1], kDigitBits), part[0]);  // exact in int32
    const __m512 sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(part[2]), _mm512_set1_ps(float(kDigitBase * kDigitBase)),
                                       _mm512_cvtepi32_ps(low));
    float* acc = &ws.acc[r][position];
    _mm512_store_ps(acc, _mm512_fmadd_ps(sum, _mm512_set1_ps(ws.weight_unit[r]), _mm512_load_ps(acc)));
  }
}

// The value products of one block on AMX-INT8: per 64-coordinate step, every key quad expanded once into the
// four chunks' B tiles (the next block's keys prefetched during the first step, spread over the quads), then
// one TDPBUSD per chunk and row block: A = the weight digits (loaded once per block), C in tiles 0-3.
template <int ROWS>
MINIMAKV_AMX_TARGET void ValueBlockInt8(const Tq3QuadAmx::State& quad_state, const uint8_t* values, size_t value_bytes,
                                        int n, int head_dim, const uint8_t* next_keys, size_t next_key_bytes,
                                        WorkspaceFor<ROWS>& ws) {
  constexpr int kRowBlocks = (kQueryParts * ROWS + kTileRows - 1) / kTileRows;
  const int steps = head_dim / kInt8TileCoords;
  const int quads = (n + 3) / 4;
  constexpr size_t kCStride = kTileCols * sizeof(float);
  // A tiles: 4 (one row block), 4-5 (two), 3-5 (three).
  if constexpr (kRowBlocks == 1) {
    TileLoad<4>(ws.w_digits[0], kTileRowBytes);
  } else if constexpr (kRowBlocks == 2) {
    TileLoad<4>(ws.w_digits[0], kTileRowBytes);
    TileLoad<5>(ws.w_digits[1], kTileRowBytes);
  } else {
    TileLoad<3>(ws.w_digits[0], kTileRowBytes);
    TileLoad<4>(ws.w_digits[1], kTileRowBytes);
    TileLoad<5>(ws.w_digits[2], kTileRowBytes);
  }
  const Tq3QuadAmx::State constants = quad_state;  // in registers (see PrepareKeyTile)
  for (int step = 0; step < steps; ++step) {
    for (int kq = 0; kq < quads; ++kq) {
      const size_t ahead = size_t(4 * kq) * value_bytes;
      if (step == 0 && next_keys != nullptr && ahead < next_key_bytes) {
        PrefetchL2(next_keys + ahead, std::min(4 * value_bytes, next_key_bytes - ahead));
      }
      __m512i u[kValueChunks];
      Tq3QuadAmx::Expand(constants, values, value_bytes, n, kq, step, u);
      for (int j = 0; j < kValueChunks; ++j) _mm512_store_si512(ws.v_quads[j][kq], u[j]);
    }
    // Quads past n keep stale units: their weight digits are zero, and int8 products have no NaN.
    const int position = step * kInt8TileCoords;
    if constexpr (kRowBlocks == 1) {
      TileZero<0>();
      TileZero<1>();
      TileZero<2>();
      TileZero<3>();
      TileLoad<5>(ws.v_quads[0], kTileRowBytes);
      TileLoad<6>(ws.v_quads[1], kTileRowBytes);
      TileDotU8S8<0, 4, 5>();
      TileDotU8S8<1, 4, 6>();
      TileLoad<5>(ws.v_quads[2], kTileRowBytes);
      TileLoad<6>(ws.v_quads[3], kTileRowBytes);
      TileDotU8S8<2, 4, 5>();
      TileDotU8S8<3, 4, 6>();
      TileStore<0>(ws.c_tiles[0], kCStride);
      TileStore<1>(ws.c_tiles[1], kCStride);
      TileStore<2>(ws.c_tiles[2], kCStride);
      TileStore<3>(ws.c_tiles[3], kCStride);
      for (int j = 0; j < kValueChunks; ++j) {
        AddWeightDigits<ROWS>(ws, position + kTileCols * j, [j](int) { return j; });
      }
    } else if constexpr (kRowBlocks == 2) {
      for (int j = 0; j < kValueChunks; j += 2) {
        TileZero<0>();
        TileZero<1>();
        TileZero<2>();
        TileZero<3>();
        TileLoad<6>(ws.v_quads[j], kTileRowBytes);
        TileLoad<7>(ws.v_quads[j + 1], kTileRowBytes);
        TileDotU8S8<0, 4, 6>();
        TileDotU8S8<1, 5, 6>();
        TileDotU8S8<2, 4, 7>();
        TileDotU8S8<3, 5, 7>();
        TileStore<0>(ws.c_tiles[0], kCStride);
        TileStore<1>(ws.c_tiles[1], kCStride);
        TileStore<2>(ws.c_tiles[2], kCStride);
        TileStore<3>(ws.c_tiles[3], kCStride);
        AddWeightDigits<ROWS>(ws, position + kTileCols * j, [](int block) { return block; });
        AddWeightDigits<ROWS>(ws, position + kTileCols * (j + 1), [](int block) { return 2 + block; });
      }
    } else {
      for (int j = 0; j < kValueChunks; ++j) {
        TileZero<0>();
        TileZero<1>();
        TileZero<2>();
        TileLoad<6>(ws.v_quads[j], kTileRowBytes);
        TileDotU8S8<0, 3, 6>();
        TileDotU8S8<1, 4, 6>();
        TileDotU8S8<2, 5, 6>();
        TileStore<0>(ws.c_tiles[0], kCStride);
        TileStore<1>(ws.c_tiles[1], kCStride);
        TileStore<2>(ws.c_tiles[2], kCStride);
        AddWeightDigits<ROWS>(ws, position + kTileCols * j, [](int block) { return block; });
      }
    }
  }
}

// Row r's query (rotated, times the score scale) as fixed-point digits in the int8 B tiles, in Tq3Int8Amx's
// expansion order, and its fixed-point unit in ws.digit_scale[r] (see kQueryFixedMax). The reference:
// WriteQueryDigits below gives the same bytes and falls back to this one for queries with inf or NaN.
template <int ROWS>
MINIMAKV_AMX_TARGET void WriteQueryDigitsScalar(const float* q, float score_scale, int r, int d,
                                                WorkspaceFor<ROWS>& ws) {
  float x[kMaxHeadDim];
  float max_abs = 0.0f;
  for (int i = 0; i < d; ++i) {
    x[i] = q[i] * score_scale;  // the fp32 product the bf16 variant splits
    max_abs = std::fmax(max_abs, std::fabs(x[i]));
  }
  const double to_fixed = max_abs > 0.0f ? double(kQueryFixedMax) / double(max_abs) : 0.0;
  ws.digit_scale[r] = float(double(max_abs) / double(kQueryFixedMax));
  for (int e = 0; e < d; ++e) {
    const long fixed = std::clamp(std::lrint(double(x[Tq3Int8Amx::Coordinate(e)]) * to_fixed), -long(kQueryFixedMax),
                                  long(kQueryFixedMax));
    int8_t digits[kQueryParts];
    long rest = fixed;
    for (int p = 0; p < kQueryParts; ++p) {
      digits[p] = int8_t(uint8_t(rest & (kDigitBase - 1)));  // the low 8 bits as a signed digit
      rest = (rest - digits[p]) / kDigitBase;                 // exact: rest - digit is a multiple of 256
    }
    for (int p = 0; p < kQueryParts; ++p) {
      const int column = p * ROWS + r;
      ws.q_digits[e / kInt8TileCoords][column / kTileCols][(e % kInt8TileCoords) / 4][4 * (column % kTileCols) + e % 4] =
          digits[p];
    }
  }
}

// A position -> coordinate table of an expansion order, built at compile time: table[e] = coordinate_of(e).
template <typename T, int kPositions, typename CoordinateOf>
constexpr std::array<T, kPositions> PositionTable(CoordinateOf coordinate_of) {
  std::array<T, kPositions> table{};
  for (int e = 0; e < kPositions; ++e) table[size_t(e)] = T(coordinate_of(e));
  return table;
}

// Byte e of a 64-coordinate chunk in Tq3Int8Amx's expansion order: the chunk's coordinate Coordinate(e) (the same
// chunk), so one VPERMB puts a chunk's digits of coordinate order into expansion order.
constexpr auto kQueryDigitOrder =
    PositionTable<uint8_t, kInt8TileCoords>([](int e) { return Tq3Int8Amx::Coordinate(e); });

// WriteQueryDigitsScalar 16 coordinates at a time, the same bytes: the same fp32 products and their maximum |x|
// (exact in any order), fixed = clamp(lrint(double(x) * to_fixed)) with VCVTPD2DQ, which rounds as lrint does (the
// MXCSR mode: nearest even by default; |double(x) * to_fixed| exceeds kQueryFixedMax by two double roundings at
// most for finite x, so it fits int32), the digits by arithmetic shifts (rest - digit is a multiple of 256: >> 8
// divides exactly). A query with inf or NaN (lrint undefined, max |x| not a number) takes the scalar code. Session
// 12 measured the scalar one (libm lrint per coordinate) at 29% of a TQ3 task's setup; docs/cpu-notes.md session 13.
template <int ROWS>
MINIMAKV_AMX_TARGET void WriteQueryDigits(const float* q, float score_scale, int r, int d, WorkspaceFor<ROWS>& ws) {
  alignas(64) float x[kMaxHeadDim];
  const __m512 scale = _mm512_set1_ps(score_scale);
  const __m512 infinity = _mm512_set1_ps(INFINITY);
  __m512 max_abs_v = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (int i = 0; i < d; i += kLanes) {
    const __m512 xv = _mm512_mul_ps(_mm512_loadu_ps(q + i), scale);
    _mm512_store_ps(x + i, xv);
    const __m512 abs = _mm512_abs_ps(xv);
    finite &= _mm512_cmp_ps_mask(abs, infinity, _CMP_LT_OQ);  // false for inf and NaN
    max_abs_v = _mm512_max_ps(max_abs_v, abs);
  }
  if (finite != 0xFFFF) return WriteQueryDigitsScalar<ROWS>(q, score_scale, r, d, ws);
  const float max_abs = _mm512_reduce_max_ps(max_abs_v);
  const double to_fixed = max_abs > 0.0f ? double(kQueryFixedMax) / double(max_abs) : 0.0;
  ws.digit_scale[r] = float(double(max_abs) / double(kQueryFixedMax));
  alignas(64) int8_t digits[kQueryParts][kMaxHeadDim];  // coordinate order
  const __m512d to_fixed_v = _mm512_set1_pd(to_fixed);
  const __m512i fixed_max = _mm512_set1_epi32(kQueryFixedMax), fixed_min = _mm512_set1_epi32(-kQueryFixedMax);
  for (int i = 0; i < d; i += kLanes) {
    const __m512 xv = _mm512_load_ps(x + i);
    const __m256i low = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(xv)), to_fixed_v));
    const __m256i high = _mm512_cvtpd_epi32(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(xv, 1)), to_fixed_v));
    __m512i rest = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
    rest = _mm512_min_epi32(_mm512_max_epi32(rest, fixed_min), fixed_max);
    for (int p = 0; p < kQueryParts; ++p) {
      _mm_store_si128(reinterpret_cast<__m128i*>(digits[p] + i), _mm512_cvtepi32_epi8(rest));  // low 8 bits
      const __m512i digit = _mm512_srai_epi32(_mm512_slli_epi32(rest, 24), 24);  // the same as a signed digit
      rest = _mm512_srai_epi32(_mm512_sub_epi32(rest, digit), kDigitBits);
    }
  }
  const __m512i order = _mm512_loadu_si512(kQueryDigitOrder.data());
  for (int c = 0; c < d / kInt8TileCoords; ++c) {
    for (int p = 0; p < kQueryParts; ++p) {
      const int column = p * ROWS + r;
      alignas(64) uint32_t quads[kTileRows];  // quad k: expansion positions 4k .. 4k + 3 of the chunk
      _mm512_store_si512(quads, _mm512_permutexvar_epi8(order, _mm512_load_si512(digits[p] + kInt8TileCoords * c)));
      for (int k = 0; k < kTileRows; ++k) {
        std::memcpy(&ws.q_digits[c][column / kTileCols][k][4 * (column % kTileCols)], &quads[k], sizeof quads[k]);
      }
    }
  }
}

// The coordinate at each position of a task's vectors, for kMaxHeadDim positions (each step's permutation stays
// inside the step, so the first d entries serve head_dim d): kQueryOrder, the keys' expansion order (the query
// tiles); kOutputOrder, the accumulators' value position order.
template <typename Codec>
constexpr auto kQueryOrder = PositionTable<int32_t, kMaxHeadDim>([](int e) { return Codec::Coordinate(e); });
template <typename Codec, bool kInt8Values>
constexpr auto kOutputOrder = PositionTable<int32_t, kMaxHeadDim>([](int e) {
  return kInt8Values ? Tq3QuadAmx::Coordinate(e) : Codec::Coordinate(ValueExpansionPosition<Codec>(e));
});

// Row r's query parts as bf16 B-tile columns p * ROWS + r (ws.q_tiles, the keys' expansion order), 16 coordinates
// at a time: x = q[coordinate] * score_scale (a gather), split into hi + mid + lo by SplitThree, the parts' upper
// halves packed per 32-position chunk (PackUpperHalves: dword i = positions 2 i, 2 i + 1) and written one dword
// per tile row. Each coordinate gets the same fp32 operations as the scalar loop this replaces (the product, hi =
// truncation of x, mid = truncation of x - hi, lo = (x - hi) - mid), so the same bits; that loop, with its
// scattered 16-bit stores, was ~40% of an FP8 task's time at one block per task (docs/cpu-notes.md session 13b).
template <typename Codec, int ROWS>
MINIMAKV_AMX_TARGET void WriteQueryParts(const float* q, float score_scale, int r, int d, WorkspaceFor<ROWS>& ws) {
  const __m512 scale = _mm512_set1_ps(score_scale);
  for (int c = 0; c < d / kTileBf16; ++c) {
    __m512 halves[2][kQueryParts];
    for (int h = 0; h < 2; ++h) {
      const __m512i at = _mm512_loadu_si512(kQueryOrder<Codec>.data() + kTileBf16 * c + kLanes * h);
      SplitThree(_mm512_mul_ps(_mm512_i32gather_ps(at, q, sizeof(float)), scale), halves[h]);
    }
    for (int p = 0; p < kQueryParts; ++p) {
      const int column = p * ROWS + r;
      alignas(64) uint32_t pairs[kTileRows];
      _mm512_store_si512(pairs, PackUpperHalves(halves[0][p], halves[1][p]));
      for (int i = 0; i < kTileRows; ++i) {
        std::memcpy(&ws.q_tiles[c][column / kTileCols][i][2 * (column % kTileCols)], &pairs[i], sizeof pairs[i]);
      }
    }
  }
}

template <typename Codec, int ROWS, bool kInt8Scores = false, bool kInt8Values = false>
MINIMAKV_AMX_TARGET void AttendTask(const KernelTask& task) {
  static_assert(!kInt8Values || kInt8Scores, "int8 values come with int8 scores");
  const PageLayout& layout = task.view->layout;
  const int d = layout.head_dim;
  WorkspaceFor<ROWS> ws;
  if constexpr (kInt8Values) {
    // Rows past 3R of the weight tiles stay zero; value quads past a short block are read (times zero weights).
    std::memset(ws.w_digits, 0, sizeof ws.w_digits);
    std::memset(ws.v_quads, 0, sizeof ws.v_quads);
  }
  // 1. Query parts (int8: digits) as B tiles, in the keys' expansion order; unused columns zero.
  if constexpr (kInt8Scores) {
    std::memset(ws.q_digits, 0, sizeof ws.q_digits);
  } else {
    std::memset(ws.q_tiles, 0, sizeof ws.q_tiles);
  }
  std::memset(ws.p_tiles, 0, sizeof ws.p_tiles);
  float rotated[kMaxHeadDim];
  for (int r = 0; r < ROWS; ++r) {
    const float* q = task.q_rows[r];
    if constexpr (Codec::kFormat == KvFormat::kTq3) {
      HadamardForwardAvx512(*task.rotation, q, rotated);
      q = rotated;
    }
    if constexpr (kInt8Scores) {
      WriteQueryDigits<ROWS>(q, task.score_scale_log2, r, d, ws);
    } else {
      WriteQueryParts<Codec, ROWS>(q, task.score_scale_log2, r, d, ws);
    }
    std::memset(ws.acc[r], 0, sizeof(float) * size_t(d));
    ws.running_max[r] = -INFINITY;
    ws.running_sum[r] = 0.0f;
  }
  LoadTileConfig(amx::FullShapeTiles(amx::kTileRegisters));
  const typename Codec::State state = MakeCodecState<Codec>();
  Tq3Int8Amx::State int8_state{};
  if constexpr (kInt8Scores) int8_state = Tq3Int8Amx::MakeState();
  Tq3QuadAmx::State quad_state{};
  if constexpr (kInt8Values) quad_state = Tq3QuadAmx::MakeState();
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
    ScoreBlock<Codec, ROWS, kInt8Scores>(state, int8_state, b.page + layout.k_codes_offset(task.kv_head, b.t0),
                                         code_bytes, values, b.n, d, ws);
    if constexpr (kInt8Values) {
      SoftmaxToWeightDigits<ROWS>(b.n, d, ws);
      ValueBlockInt8<ROWS>(quad_state, values, code_bytes, b.n, d, b.next_keys, size_t(b.next_n) * code_bytes, ws);
    } else {
      SoftmaxToWeightTiles<ROWS>(b.n, d, kHasScales, ws);
      ValueBlock<Codec, ROWS>(state, values, code_bytes, b.n, d, b.next_keys, size_t(b.next_n) * code_bytes, ws);
    }
  }
  TileRelease();
  // 3. Normalize, restore coordinate order, rotate TQ3 back.
  for (int r = 0; r < ROWS; ++r) {
    const float inv_sum = 1.0f / ws.running_sum[r];
    float* out = Codec::kFormat == KvFormat::kTq3 ? rotated : task.out_rows[r];
    const __m512 inv = _mm512_set1_ps(inv_sum);  // out[coordinate] = acc * inv_sum, 16 at a time (a scatter)
    for (int e = 0; e < d; e += kLanes) {
      const __m512i at = _mm512_loadu_si512(kOutputOrder<Codec, kInt8Values>.data() + e);
      _mm512_i32scatter_ps(out, at, _mm512_mul_ps(_mm512_load_ps(&ws.acc[r][e]), inv), sizeof(float));
    }
    if constexpr (Codec::kFormat == KvFormat::kTq3) {
      HadamardInverseAvx512(*task.rotation, rotated, task.out_rows[r]);
    }
    *task.lse_rows[r] = ws.running_max[r] + std::log2(ws.running_sum[r]);
  }
}

template <typename Codec, bool kInt8Scores = false, bool kInt8Values = false>
void AttendFormat(const KernelTask& task) {
  switch (task.num_rows) {
    case 1: return AttendTask<Codec, 1, kInt8Scores, kInt8Values>(task);
    case 2: return AttendTask<Codec, 2, kInt8Scores, kInt8Values>(task);
    case 3: return AttendTask<Codec, 3, kInt8Scores, kInt8Values>(task);
    case 4: return AttendTask<Codec, 4, kInt8Scores, kInt8Values>(task);
    case 5: return AttendTask<Codec, 5, kInt8Scores, kInt8Values>(task);
    case 6: return AttendTask<Codec, 6, kInt8Scores, kInt8Values>(task);
    case 7: return AttendTask<Codec, 7, kInt8Scores, kInt8Values>(task);
    case 8: return AttendTask<Codec, 8, kInt8Scores, kInt8Values>(task);
    case 9: return AttendTask<Codec, 9, kInt8Scores, kInt8Values>(task);
    case 10: return AttendTask<Codec, 10, kInt8Scores, kInt8Values>(task);
    case 11: return AttendTask<Codec, 11, kInt8Scores, kInt8Values>(task);
    case 12: return AttendTask<Codec, 12, kInt8Scores, kInt8Values>(task);
    case 13: return AttendTask<Codec, 13, kInt8Scores, kInt8Values>(task);
    case 14: return AttendTask<Codec, 14, kInt8Scores, kInt8Values>(task);
    case 15: return AttendTask<Codec, 15, kInt8Scores, kInt8Values>(task);
    default: return AttendTask<Codec, 16, kInt8Scores, kInt8Values>(task);
  }
}

// Linux keeps AMX tile data off until a process asks (ref: Documentation/arch/x86/xstate.rst).
constexpr long kArchGetXcompPerm = 0x1022;
constexpr long kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool RequestTilePermission() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long features = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &features) != 0) return false;
  return (features >> kXfeatureXtiledata) & 1u;
}

}  // namespace

bool AmxUsable() {
  static const bool usable = [] {
    __builtin_cpu_init();
    const bool cpu = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                     __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("fma") &&
                     __builtin_cpu_supports("f16c") && __builtin_cpu_supports("gfni") &&
                     __builtin_cpu_supports("avx512bf16");
    return cpu && RequestTilePermission();
  }();
  return usable;
}

bool AmxInt8Usable() {
  static const bool usable = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("amx-int8") && AmxUsable();
  }();
  return usable;
}

void Tq3AmxCentroidUnits(uint16_t* units_bf16) { Tq3Amx::Tq3AmxUnits(units_bf16); }

MINIMAKV_AMX_TARGET void Tq3AmxInt8KeyUnits(const uint8_t* codes, int head_dim, int8_t* units) {
  alignas(64) uint8_t tile[kKeyTile][kMaxHeadDim];
  const uint8_t* a_base;
  size_t a_stride;
  PrepareKeyTile<Tq3Amx, true>(Tq3Amx::MakeState(), Tq3Int8Amx::MakeState(), codes, size_t(Tq3CodeBytes(head_dim)), 0,
                               1, head_dim, tile[0], &a_base, &a_stride);
  for (int e = 0; e < head_dim; ++e) units[Tq3Int8Amx::Coordinate(e)] = int8_t(a_base[e]);
}

MINIMAKV_AMX_TARGET void Tq3AmxInt8ValueUnits(const uint8_t* values, size_t value_bytes, int n, int head_dim,
                                              int8_t* units) {
  const Tq3QuadAmx::State state = Tq3QuadAmx::MakeState();
  for (int step = 0; step < head_dim / kInt8TileCoords; ++step) {
    __m512i u[kValueChunks];
    Tq3QuadAmx::Expand(state, values, value_bytes, n, 0, step, u);
    alignas(64) int8_t rows[kValueChunks][kTileRowBytes];  // row 0 (the first key quad) of each chunk's B tile
    for (int j = 0; j < kValueChunks; ++j) _mm512_store_si512(rows[j], u[j]);
    for (int e = step * kInt8TileCoords; e < (step + 1) * kInt8TileCoords; ++e) {
      const int j = (e % kInt8TileCoords) / kTileCols, column = e % kTileCols;
      for (int k = 0; k < n; ++k) units[k * head_dim + Tq3QuadAmx::Coordinate(e)] = rows[j][4 * column + k];
    }
  }
}

MINIMAKV_AMX_TARGET void Fp8AmxKeyBf16(const uint8_t* codes, int head_dim, uint16_t* bf16) {
  alignas(64) uint16_t tile[kKeyTile][kMaxHeadDim];
  const uint8_t* a_base;
  size_t a_stride;
  PrepareKeyTile<Fp8Amx, false>(Fp8Amx::MakeState(), Tq3Int8Amx::State{}, codes, size_t(head_dim), 0, 1, head_dim,
                                reinterpret_cast<uint8_t*>(tile[0]), &a_base, &a_stride);
  for (int e = 0; e < head_dim; ++e) bf16[Fp8Amx::Coordinate(e)] = tile[0][e];
}

MINIMAKV_AMX_TARGET void Fp8AmxValueBf16(const uint8_t* values, int n, int head_dim, uint16_t* bf16) {
  const Fp8Amx::State state = Fp8Amx::MakeState();
  for (int step = 0; step < head_dim / Fp8Amx::kStepCoords; ++step) {
    __m512i rows[2 * Fp8Amx::kZmm];
    ValuePairRows<Fp8Amx, 0, Fp8Amx::kZmm>(state, values, size_t(head_dim), n, 0, step, false, nullptr, 0, rows);
    for (int t = 0; t < 2 * Fp8Amx::kZmm; ++t) {
      alignas(64) uint16_t words[kTileBf16];
      _mm512_store_si512(words, rows[t]);
      // rows[2 z + h], dword 4 L + j: both keys' words at expansion position 32 z + 8 L + 4 h + j of the step.
      for (int dword = 0; dword < kTileBf16 / 2; ++dword) {
        const int e = step * Fp8Amx::kStepCoords + 32 * (t / 2) + 8 * (dword / 4) + 4 * (t % 2) + dword % 4;
        for (int key = 0; key < 2; ++key) bf16[key * head_dim + Fp8Amx::Coordinate(e)] = words[2 * dword + key];
      }
    }
  }
}

size_t Tq3AmxQueryDigitBytes(int rows, int head_dim) {
  const int capacity = rows <= kNarrowTaskRows ? kNarrowTaskRows : kMaxTaskRows;
  return size_t(head_dim / kInt8TileCoords) * size_t(ColumnBlocksFor(capacity)) * kTileRows * kTileRowBytes;
}

namespace {

template <int ROWS>
MINIMAKV_AMX_TARGET void QueryDigitsOfRows(const float* q, float score_scale, int head_dim, bool reference,
                                           int8_t* tiles, float* digit_scales) {
  const auto ws = std::make_unique<WorkspaceFor<ROWS>>();
  std::memset(ws->q_digits, 0, sizeof ws->q_digits);
  for (int r = 0; r < ROWS; ++r) {
    const float* row = q + size_t(r) * size_t(head_dim);
    if (reference) {
      WriteQueryDigitsScalar<ROWS>(row, score_scale, r, head_dim, *ws);
    } else {
      WriteQueryDigits<ROWS>(row, score_scale, r, head_dim, *ws);
    }
    digit_scales[r] = ws->digit_scale[r];
  }
  std::memcpy(tiles, ws->q_digits, Tq3AmxQueryDigitBytes(ROWS, head_dim));
}

template <int... kRowsLess1>
void QueryDigitsOfRowCount(std::integer_sequence<int, kRowsLess1...>, const float* q, int rows, float score_scale,
                           int head_dim, bool reference, int8_t* tiles, float* digit_scales) {
  ((rows == kRowsLess1 + 1 ? QueryDigitsOfRows<kRowsLess1 + 1>(q, score_scale, head_dim, reference, tiles, digit_scales)
                           : void()),
   ...);
}

}  // namespace

void Tq3AmxQueryDigits(const float* q, int rows, float score_scale, int head_dim, bool reference, int8_t* tiles,
                       float* digit_scales) {
  QueryDigitsOfRowCount(std::make_integer_sequence<int, kMaxTaskRows>(), q, rows, score_scale, head_dim, reference,
                        tiles, digit_scales);
}

void AttendAmxTq3Int8(const KernelTask& task) {
  // Empty tasks and other formats (the dispatcher never sends those here) take AttendAmx.
  if (task.num_pages == 0 || task.view->layout.format != KvFormat::kTq3) return AttendAmx(task);
  AttendFormat<Tq3Amx, true>(task);
}

void AttendAmxTq3Int8Values(const KernelTask& task) {
  if (task.num_pages == 0 || task.view->layout.format != KvFormat::kTq3) return AttendAmx(task);
  AttendFormat<Tq3Amx, true, true>(task);
}

void AttendAmx(const KernelTask& task) {
  if (task.num_pages == 0) {
    WriteEmptyState(task, task.view->layout.head_dim);
    return;
  }
  switch (task.view->layout.format) {
    case KvFormat::kBf16: return AttendFormat<Bf16Amx>(task);
    case KvFormat::kFp8: return AttendFormat<Fp8Amx>(task);
    case KvFormat::kTq3: return AttendFormat<Tq3Amx>(task);
  }
}

}  // namespace minimakv::cpu

#else  // not x86-64 Linux: never selected (AmxUsable() is false); keep the symbols so the library links.

namespace minimakv::cpu {
bool AmxUsable() { return false; }
bool AmxInt8Usable() { return false; }
void AttendAmxTq3Int8(const KernelTask& task) { AttendScalar(task); }
void AttendAmxTq3Int8Values(const KernelTask& task) { AttendScalar(task); }
void Tq3AmxInt8KeyUnits(const uint8_t*, int, int8_t*) {}
void Tq3AmxInt8ValueUnits(const uint8_t*, size_t, int, int, int8_t*) {}
void Fp8AmxKeyBf16(const uint8_t*, int, uint16_t*) {}
void Fp8AmxValueBf16(const uint8_t*, int, int, uint16_t*) {}
size_t Tq3AmxQueryDigitBytes(int, int) { return 0; }
void Tq3AmxQueryDigits(const float*, int, float, int, bool, int8_t*, float*) {}
void Tq3AmxCentroidUnits(uint16_t* units_bf16) {
  for (int i = 0; i < 8; ++i) units_bf16[i] = 0;
}
void AttendAmx(const KernelTask& task) { AttendScalar(task); }
}  // namespace minimakv::cpu

#endif
