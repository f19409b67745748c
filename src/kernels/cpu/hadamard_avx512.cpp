// The Hadamard rotation of the AVX-512 and AMX TQ3 kernels (cpu_kernels.h: HadamardForwardAvx512,
// HadamardInverseAvx512): the same fp32 operations per element as HadamardRotation::Forward / Inverse, which stay
// the reference. Every element goes through the sign product (Forward), the butterfly passes h = 1, 2, ..., d/2
// in that order (a + b at the lower index j, a - b at j + h, a = v[j] and b = v[j + h] as the operands in that
// order) and the 1/sqrt(d) product (Inverse: then the sign product), so the bits are those of the scalar code.
// Only the pairs of one pass, which are independent, run 16 at a time: passes h = 1..8 pair lanes of one
// register, h >= 16 pair whole registers. Session 12 measured the scalar pair at ~45% of a TQ3 task's setup
// (docs/cpu-notes.md, session 13 has the A/B).
#include "kernels/cpu/cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels/cpu/avx512_exp2.h"  // (and <immintrin.h>)

#define MINIMAKV_HADAMARD_TARGET __attribute__((target("avx512f")))

namespace minimakv::cpu {
namespace {

constexpr int kLanes = 16;

// One butterfly pass h (1, 2, 4 or 8) inside every register: lane i pairs with lane i ^ h; the lanes with bit h
// set are the upper elements (a - b with a the partner), the others the lower ones (a + b with b the partner).
template <int H>
MINIMAKV_HADAMARD_TARGET inline __m512 LanePass(__m512 v) {
  __m512 partner;
  __mmask16 upper;
  if constexpr (H == 1) {
    partner = _mm512_permute_ps(v, 0xB1);  // lanes 1 0 3 2 in each 128-bit lane
    upper = 0xAAAA;
  } else if constexpr (H == 2) {
    partner = _mm512_permute_ps(v, 0x4E);  // lanes 2 3 0 1
    upper = 0xCCCC;
  } else if constexpr (H == 4) {
    partner = _mm512_shuffle_f32x4(v, v, 0xB1);  // 128-bit lanes 1 0 3 2
    upper = 0xF0F0;
  } else {
    static_assert(H == 8);
    partner = _mm512_shuffle_f32x4(v, v, 0x4E);  // 128-bit lanes 2 3 0 1
    upper = 0xFF00;
  }
  return _mm512_mask_sub_ps(_mm512_add_ps(v, partner), upper, partner, v);
}

template <int kRegs>
MINIMAKV_HADAMARD_TARGET inline void Butterflies(__m512 (&v)[kRegs]) {
  for (int i = 0; i < kRegs; ++i) v[i] = LanePass<1>(v[i]);
  for (int i = 0; i < kRegs; ++i) v[i] = LanePass<2>(v[i]);
  for (int i = 0; i < kRegs; ++i) v[i] = LanePass<4>(v[i]);
  for (int i = 0; i < kRegs; ++i) v[i] = LanePass<8>(v[i]);
  for (int h = 1; h < kRegs; h *= 2) {  // h registers = 16 h coordinates
    for (int i = 0; i < kRegs; ++i) {
      if (i & h) continue;
      const __m512 a = v[i];
      const __m512 b = v[i + h];
      v[i] = _mm512_add_ps(a, b);
      v[i + h] = _mm512_sub_ps(a, b);
    }
  }
}

template <int kRegs>
MINIMAKV_HADAMARD_TARGET void Forward(const HadamardRotation& rotation, const float* x, float* y) {
  const float* signs = rotation.signs().data();
  __m512 v[kRegs];
  for (int i = 0; i < kRegs; ++i) {
    v[i] = _mm512_mul_ps(_mm512_loadu_ps(x + kLanes * i), _mm512_loadu_ps(signs + kLanes * i));
  }
  Butterflies(v);
  const __m512 norm = _mm512_set1_ps(rotation.inv_sqrt_dim());
  for (int i = 0; i < kRegs; ++i) _mm512_storeu_ps(y + kLanes * i, _mm512_mul_ps(v[i], norm));
}

template <int kRegs>
MINIMAKV_HADAMARD_TARGET void Inverse(const HadamardRotation& rotation, const float* y, float* x) {
  const float* signs = rotation.signs().data();
  __m512 v[kRegs];
  for (int i = 0; i < kRegs; ++i) v[i] = _mm512_loadu_ps(y + kLanes * i);
  Butterflies(v);
  const __m512 norm = _mm512_set1_ps(rotation.inv_sqrt_dim());
  for (int i = 0; i < kRegs; ++i) {
    _mm512_storeu_ps(x + kLanes * i, _mm512_mul_ps(_mm512_mul_ps(v[i], norm), _mm512_loadu_ps(signs + kLanes * i)));
  }
}

}  // namespace

void HadamardForwardAvx512(const HadamardRotation& rotation, const float* x, float* y) {
  switch (rotation.head_dim()) {
    case 64: return Forward<4>(rotation, x, y);
    case 128: return Forward<8>(rotation, x, y);
    case 256: return Forward<16>(rotation, x, y);
    default: return rotation.Forward(x, y);  // (Create takes no other head_dim)
  }
}

void HadamardInverseAvx512(const HadamardRotation& rotation, const float* y, float* x) {
  switch (rotation.head_dim()) {
    case 64: return Inverse<4>(rotation, y, x);
    case 128: return Inverse<8>(rotation, y, x);
    case 256: return Inverse<16>(rotation, y, x);
    default: return rotation.Inverse(y, x);
  }
}

}  // namespace minimakv::cpu

#else  // no x86-64 GCC / Clang: the SIMD kernels are not built either

namespace minimakv::cpu {
void HadamardForwardAvx512(const HadamardRotation& rotation, const float* x, float* y) { rotation.Forward(x, y); }
void HadamardInverseAvx512(const HadamardRotation& rotation, const float* y, float* x) { rotation.Inverse(y, x); }
}  // namespace minimakv::cpu

#endif
