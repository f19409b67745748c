// 2^x on 16 fp32 lanes: the online softmax of the AVX-512 and AMX kernels (cpu_kernels_avx512.cpp,
// cpu_kernels_amx.cpp), one copy for both. Include only in x86-64 GCC / Clang builds (the kernels' #if).
#pragma once

// GCC 12's intrinsic headers build some results from _mm512_undefined_ps(), which -Wuninitialized flags at
// every inlined use (a header false positive, not our code).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

namespace minimakv::cpu::simd {

// Taylor coefficients of 2^f = exp(f ln 2): ln(2)^k / k!. Degree 7 on |f| <= 0.5 gives relative error
// (0.5 ln 2)^8 / 8! ~ 5e-9, below fp32 rounding.
inline constexpr float kExp2Taylor[8] = {1.0f,
                                         0.6931471805599453f,
                                         0.2402265069591007f,
                                         0.05550410866482158f,
                                         0.009618129107628477f,
                                         0.0013333558146428443f,
                                         0.00015403530393381608f,
                                         1.525273380405984e-05f};
// Inputs are clamped here: 2^-160 is 0 in fp32 after scalef, and the clamp keeps roundscale finite.
inline constexpr float kExp2MinInput = -160.0f;

// AVX-512F only, so both kernel files' targets (supersets of it) inline it.
__attribute__((target("avx512f"), always_inline)) inline __m512 Exp2(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kExp2MinInput));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 poly = _mm512_set1_ps(kExp2Taylor[7]);
  for (int k = 6; k >= 0; --k) poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(kExp2Taylor[k]));
  return _mm512_scalef_ps(poly, n);
}

}  // namespace minimakv::cpu::simd
