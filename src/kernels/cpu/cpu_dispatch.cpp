// The one place that decides which CPU kernel family runs: AMX when the CPU has it and the OS granted tile
// state (kernels/cpu/cpu_kernels_amx.cpp), else AVX-512 when the CPU reports every feature that translation
// unit was compiled for (kernels/cpu/cpu_kernels_avx512.cpp), else the scalar kernels. Callers may cap the
// choice (CpuAttentionOptions::force_scalar / allow_amx, or MINIMAKV_CPU_ISA for a whole process, e.g. to
// bench AVX-512 beside AMX). "Is it supported" and "what runs" come from the same function.
#include <algorithm>
#include <cstdlib>
#include <cstring>

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

// MINIMAKV_CPU_ISA caps the family for the whole process; unset or unrecognized: no cap.
CpuIsa EnvironmentCap() {
  static const CpuIsa cap = [] {
    const char* value = std::getenv("MINIMAKV_CPU_ISA");
    if (value == nullptr) return CpuIsa::kAmx;
    if (std::strcmp(value, "scalar") == 0) return CpuIsa::kScalar;
    if (std::strcmp(value, "avx512") == 0) return CpuIsa::kAvx512;
    return CpuIsa::kAmx;
  }();
  return cap;
}

}  // namespace

CpuIsa MaxIsaOf(bool force_scalar, bool allow_amx) {
  return force_scalar ? CpuIsa::kScalar : allow_amx ? CpuIsa::kAmx : CpuIsa::kAvx512;
}

CpuIsa SelectIsa(CpuIsa max_isa) {
  const CpuIsa cap = std::min(max_isa, EnvironmentCap());
  // AmxUsable() asks the OS for tile state, so it is only called when AMX may run.
  if (cap >= CpuIsa::kAmx && CpuHasAvx512Kernels() && AmxUsable()) return CpuIsa::kAmx;
  if (cap >= CpuIsa::kAvx512 && CpuHasAvx512Kernels()) return CpuIsa::kAvx512;
  return CpuIsa::kScalar;
}

KernelFn KernelFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return &AttendAmx;
    case CpuIsa::kAvx512: return &AttendAvx512;
    case CpuIsa::kScalar: break;
  }
  return &AttendScalar;
}

const char* IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx: return "amx";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kScalar: break;
  }
  return "scalar";
}

}  // namespace minimakv::cpu
