// The one place that decides which CPU kernel family runs: AVX-512 when the CPU reports every feature the
// AVX-512 translation unit was compiled for (kernels/cpu/cpu_kernels_avx512.cpp), else the scalar kernels.
// "Is it supported" and "what runs" come from the same function, so they cannot disagree.
#include "kernels/cpu/cpu_kernels.h"

namespace minimakv::cpu {
namespace {

bool CpuHasAvx512Kernels() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace

KernelFn SelectKernel(bool force_scalar) {
  if (!force_scalar && CpuHasAvx512Kernels()) return &AttendAvx512;
  return &AttendScalar;
}

const char* SelectedIsaName(bool force_scalar) {
  return SelectKernel(force_scalar) == &AttendScalar ? "scalar" : "avx512";
}

}  // namespace minimakv::cpu
