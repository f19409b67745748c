// TQ3: TurboQuant MSE, 3 bits per coordinate, in the randomized Hadamard domain.
// ref: TurboQuant, arXiv 2504.19874 (Alg. 1, MSE variant); ../shared/MINIMA-KV.md part 5.
//
// Encoding one head vector x (d = 64, 128 or 256), step by step, all fp32 (every implementation follows
// these steps in this order, so CPU and GPU produce identical bytes):
//   1. y = HadamardRotation::Forward(x)                       (|y| = |x|)
//   2. norm = sqrt(TreeSumOfSquares(y))                        (pairwise sum, see Tq3TreeSum)
//   3. u_i = y_i * (sqrt(d) / norm)                            (unit-variance coordinates)
//   4. idx_i = nearest Lloyd-Max centroid of N(0,1) to u_i     (Tq3Quantize: sign bit + 2 magnitude bits)
//   5. scale = norm / sqrt(TreeSumOfSquares(c[idx]))           ("norm correction": |scale * c| = |x|)
//      stored as fp16 (round to nearest even).
// Decoding in the rotated domain: y_hat_i = scale * c[idx_i]. Attention never leaves that domain: a key's
// score is scale * sum_i q'_i c[idx_i] with q' = Forward(q), and the output is rotated back once.
// A zero vector stores scale 0 (and decodes to zero).
//
// Byte layout of one vector's codes (3d/8 bytes; d=128: 48 B), chosen so that decode gets 3-bit selectors with
// one mask per 8 coordinates (CUDA prmt selectors; the CPU kernels shift the nibbles into
// place with VPSRLVD / VPSRLVW and look them up with VPERMPS / VPERMW): coordinates in groups of 32; group g
// takes 12 bytes at offset 12 g, three little-endian uint32 words W0, W1, W2 (bytes [12g + 4i, 12g + 4i + 4)).
// Nibble n (bits 4n .. 4n + 3, n < 8) of word Wi (i < 3):
//   bits 4n .. 4n + 2  the 3-bit index of coordinate 32g + 8i + n
//   bit  4n + 3        bit i of the index of coordinate 32g + 24 + n
// So Wi & 0x77777777 holds coordinates 8i .. 8i + 7 of the group as nibbles, and the "spill" coordinates
// 24 .. 31 are ((W0 >> 3) & 0x11111111) | ((W1 >> 2) & 0x22222222) | ((W2 >> 1) & 0x44444444), nibble n =
// coordinate 24 + n. Example: index 5 (binary 101) at coordinate 33 (g = 1, i = 0, n = 1) sets bits 4 and 6 of
// W0 of group 1 (bytes 12 .. 15); index 6 at coordinate 58 (g = 1, spill n = 2) sets bit 11 of W1 and of W2.
// (Sessions 1-5 used three bit planes per group; docs/cuda-notes.md "selector-ready layout" says why it changed.)
// Index = sign << 2 | magnitude; magnitude m selects Tq3Magnitude(m). The fp16 scale lives apart from the
// codes, in the page's scale section (see page_layout.h).
#pragma once

#include <cstdint>

#include "minimakv/hadamard_rotation.h"
#include "minimakv/host_device.h"
#include "minimakv/status.h"

namespace minimakv {

// Lloyd-Max centroids of N(0,1) for 8 levels (magnitudes; each is used with both signs).
// ref: Max, "Quantizing for minimum distortion", IRE Trans. IT-6, 1960, table for N=8: 0.2451, 0.7560, 1.3440,
// 2.1520. We store each magnitude as B_m / alpha, where the "units" B_m = 13, 40, 71, 114 are small integers
// (exact in int8, bf16, fp16 and fp32) and alpha = 52.94 minimizes the quantizer's MSE on N(0,1) for these
// integers (worst relative gap to Max's table 2.1e-3; the integers were chosen as the best fit with B_3 <= 127).
// Why: a tensor-core or AMX kernel uses the units as exact operands and folds 1/alpha into the per-vector scale;
// as int8 a unit is one digit, so the GPU scores keys with one int8 MMA operand per query digit (sessions 1-5
// used 175/512, 135/128, 15/8, 3: exact in 16 bits but two int8 digits). Cost: the MSE on N(0,1) is 0.0345490
// against 0.0345478 for Max's table (exact integration over the Gaussian), +0.004%. Tq3Magnitude(m) is the fp32
// quotient float(B_m) / float(alpha), written out so host and device use the same bits; a codec test checks both.
inline constexpr float kTq3MagnitudeUnits[4] = {13.0f, 40.0f, 71.0f, 114.0f};
inline constexpr float kTq3UnitsPerMagnitude = 52.94f;  // alpha: units = alpha * magnitude
MINIMAKV_HOST_DEVICE constexpr float Tq3Magnitude(int m) {
  // 0x1.f6e8b2p-3 = 0.2455610, 0x1.82da62p-1 = 0.7555724, 0x1.575504p+0 = 1.3411410, 0x1.13a2p+1 = 2.1533813.
  return m == 0 ? 0x1.f6e8b2p-3f : m == 1 ? 0x1.82da62p-1f : m == 2 ? 0x1.575504p+0f : 0x1.13a2p+1f;
}
// Decision thresholds between neighbouring magnitudes: midpoints, the Lloyd-Max nearest-neighbour rule.
MINIMAKV_HOST_DEVICE constexpr float Tq3Threshold(int m) { return (Tq3Magnitude(m) + Tq3Magnitude(m + 1)) * 0.5f; }

MINIMAKV_HOST_DEVICE constexpr float Tq3Centroid(int index) {
  return (index & 4) ? -Tq3Magnitude(index & 3) : Tq3Magnitude(index & 3);
}

// Index of the centroid nearest to u; ties at a threshold go to the larger magnitude, -0 counts as positive.
MINIMAKV_HOST_DEVICE inline int Tq3Quantize(float u) {
  const float a = u < 0.0f ? -u : u;
  const int magnitude = (a >= Tq3Threshold(0)) + (a >= Tq3Threshold(1)) + (a >= Tq3Threshold(2));
  return (u < 0.0f ? 4 : 0) | magnitude;
}

// Pairwise sum of v[0..n) (n a power of two): stride n/2, n/4, ..., 1, v[i] += v[i + stride]. Destroys v.
MINIMAKV_HOST_DEVICE inline float Tq3TreeSum(float* v, int n) {
  for (int stride = n / 2; stride > 0; stride /= 2) {
    for (int i = 0; i < stride; ++i) v[i] = v[i] + v[i + stride];
  }
  return v[0];
}

MINIMAKV_HOST_DEVICE constexpr int Tq3CodeBytes(int head_dim) { return 3 * head_dim / 8; }

// Reads / writes the 3-bit index of coordinate i in a code block laid out as above (as uint32 words).
MINIMAKV_HOST_DEVICE inline int Tq3GetIndex(const uint32_t* words, int i) {
  const uint32_t* group = words + 3 * (i / 32);
  const int c = i % 32;
  if (c < 24) return int((group[c / 8] >> (4 * (c % 8))) & 7u);
  const int spill_bit = 4 * (c - 24) + 3;
  return int((group[0] >> spill_bit) & 1u) | int(((group[1] >> spill_bit) & 1u) << 1) |
         int(((group[2] >> spill_bit) & 1u) << 2);
}
MINIMAKV_HOST_DEVICE inline void Tq3SetIndex(uint32_t* words, int i, int index) {
  uint32_t* group = words + 3 * (i / 32);
  const int c = i % 32;
  if (c < 24) {
    const int shift = 4 * (c % 8);
    group[c / 8] = (group[c / 8] & ~(7u << shift)) | (uint32_t(index & 7) << shift);
    return;
  }
  const uint32_t mask = 1u << (4 * (c - 24) + 3);
  for (int bit = 0; bit < 3; ++bit) {
    group[bit] = (index >> bit) & 1 ? (group[bit] | mask) : (group[bit] & ~mask);
  }
}

// Encodes one vector. codes: Tq3CodeBytes(d) bytes (4-byte aligned), scale_fp16: one value.
// InvalidArgument if x holds NaN/Inf (naming the coordinate) or its norm overflows the fp16 scale.
Status Tq3EncodeVector(const HadamardRotation& rotation, const float* x, uint8_t* codes, uint16_t* scale_fp16);

// y_hat = scale * c[idx]: the reconstruction in the rotated domain (what direct decode works with).
void Tq3DecodeRotated(const uint8_t* codes, uint16_t scale_fp16, int head_dim, float* y_hat);

// x_hat = Inverse(y_hat): the reconstruction in the original domain (materializing reference, tests).
void Tq3DecodeVector(const HadamardRotation& rotation, const uint8_t* codes, uint16_t scale_fp16, float* x_hat);

}  // namespace minimakv
