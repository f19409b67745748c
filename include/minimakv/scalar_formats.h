// Bit-exact conversions between fp32 and the narrow scalar formats minimakv stores: bf16, fp16 (TQ3 scales)
// and FP8 E4M3 (the OCP "e4m3fn" variant: no infinities, max finite 448, 0x7F/0xFF are NaN).
// Plain integer arithmetic, so the CPU and CUDA paths produce the same bytes. All rounding is to nearest, ties
// to even. Callers reject NaN/Inf before converting (the encoders do); these helpers do not check.
#pragma once

#include <cstdint>
#include <cstring>

#include "minimakv/host_device.h"

namespace minimakv {

MINIMAKV_HOST_DEVICE inline uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#endif
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
MINIMAKV_HOST_DEVICE inline float FloatFromBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#endif
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// ---- bf16 ----
MINIMAKV_HOST_DEVICE inline uint16_t FloatToBf16(float x) {
  uint32_t bits = FloatBits(x);
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return uint16_t(bits >> 16);
}
MINIMAKV_HOST_DEVICE inline float Bf16ToFloat(uint16_t h) { return FloatFromBits(uint32_t(h) << 16); }

// ---- fp16 (IEEE binary16) ----
inline constexpr float kFp16MaxFinite = 65504.0f;
MINIMAKV_HOST_DEVICE inline uint16_t FloatToFp16(float x) {
  const uint32_t bits = FloatBits(x);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to infinity
  if (abs_bits < 0x38800000u) {                         // below 2^-14: fp16 subnormal, units of 2^-24
    const float scaled = FloatFromBits(abs_bits) * 16777216.0f;  // exact: multiply by 2^24
    // Round to nearest even by hand (no dependence on the FPU rounding mode or rintf availability).
    uint32_t whole = uint32_t(scaled);
    const float frac = scaled - float(whole);
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) ++whole;
    return sign | uint16_t(whole);
  }
  uint32_t rebased = abs_bits - (112u << 23);  // exponent bias 127 -> 15
  rebased += 0xFFFu + ((rebased >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return sign | uint16_t(rebased >> 13);
}
MINIMAKV_HOST_DEVICE inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = float(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return FloatFromBits(sign | 0x7F800000u | (mantissa << 13));
  return FloatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- FP8 E4M3 (e4m3fn) ----
inline constexpr float kE4m3MaxFinite = 448.0f;
// Saturates |x| > 448 to 448 (the scale makes |x| <= 448 in practice; saturation guards rounding at the edge).
MINIMAKV_HOST_DEVICE inline uint8_t FloatToE4m3(float x) {
  const uint32_t bits = FloatBits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits >= 0x43E00000u) return sign | 0x7Eu;  // >= 448
  if (abs_bits < 0x3C800000u) {                        // below 2^-6: subnormal, units of 2^-9
    const float scaled = FloatFromBits(abs_bits) * 512.0f;  // exact: multiply by 2^9
    uint32_t whole = uint32_t(scaled);
    const float frac = scaled - float(whole);
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) ++whole;
    return sign | uint8_t(whole);  // whole == 8 is the smallest normal, encoded the same way
  }
  uint32_t rebased = abs_bits - (120u << 23);     // exponent bias 127 -> 7
  rebased += 0x7FFFFu + ((rebased >> 20) & 1u);   // round to nearest even on the 20 dropped bits
  uint32_t code = rebased >> 20;
  if (code > 0x7Eu) code = 0x7Eu;
  return sign | uint8_t(code);
}
MINIMAKV_HOST_DEVICE inline float E4m3ToFloat(uint8_t code) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xFu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-9
    const float magnitude = float(mantissa) * (1.0f / 512.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0xF && mantissa == 0x7) return FloatFromBits(0x7FC00000u);  // NaN encoding, never written
  return FloatFromBits(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

}  // namespace minimakv
