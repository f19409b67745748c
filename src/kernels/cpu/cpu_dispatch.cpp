// The one place that decides which CPU kernel family runs for a format. Supported families: AMX when the CPU
// has it and the OS granted tile state (kernels/cpu/cpu_kernels_amx.cpp), AVX-512 when the CPU reports every
// feature that translation unit was compiled for (kernels/cpu/cpu_kernels_avx512.cpp), the scalar kernels
// always. CpuKernelFamily::kAuto picks per format what measured fastest on this project's AMX machine in
// `minimakv bench --isa amx,avx512` (Llama shape: 8 KV heads, GQA 4, 32K tokens, 2 threads; docs/BENCHMARKS.md
// section 3): AMX for FP8, whose AVX-512 kernel spends most of its time widening E4M3 codes (the AMX kernel
// widens each code once to bf16 and runs the products on the tile unit), and for TQ3 since its codes are one
// exact bf16 part (the units of tq3_codec.h; before that, two centroid parts per value made it 0-25% slower);
// AVX-512 for BF16 (no widening to save, the AMX kernel pays for the extra query and weight parts and the VNNI
// value copy: 5-10% slower). "Is it supported" and "what runs" come from the same function.
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

// MINIMAKV_CPU_ISA replaces CpuKernelFamily::kAuto for the whole process; unset or unrecognized: kAuto.
CpuKernelFamily EnvironmentFamily() {
  static const CpuKernelFamily family = [] {
    const char* value = std::getenv("MINIMAKV_CPU_ISA");
    if (value == nullptr) return CpuKernelFamily::kAuto;
    if (std::strcmp(value, "scalar") == 0) return CpuKernelFamily::kScalar;
    if (std::strcmp(value, "avx512") == 0) return CpuKernelFamily::kAvx512;
    if (std::strcmp(value, "amx") == 0) return CpuKernelFamily::kAmx;
    return CpuKernelFamily::kAuto;
  }();
  return family;
}

}  // namespace

CpuIsa SelectIsa(CpuKernelFamily family, bool force_scalar, KvFormat format) {
  if (force_scalar) family = CpuKernelFamily::kScalar;
  if (family == CpuKernelFamily::kAuto) family = EnvironmentFamily();
  CpuIsa wanted = CpuIsa::kAmx;
  switch (family) {
    case CpuKernelFamily::kAuto: wanted = format == KvFormat::kBf16 ? CpuIsa::kAvx512 : CpuIsa::kAmx; break;
    case CpuKernelFamily::kAmx: wanted = CpuIsa::kAmx; break;
    case CpuKernelFamily::kAvx512: wanted = CpuIsa::kAvx512; break;
    case CpuKernelFamily::kScalar: wanted = CpuIsa::kScalar; break;
  }
  // AmxUsable() asks the OS for tile state, so it is only called when AMX may run.
  if (wanted == CpuIsa::kAmx && CpuHasAvx512Kernels() && AmxUsable()) return CpuIsa::kAmx;
  if (wanted >= CpuIsa::kAvx512 && CpuHasAvx512Kernels()) return CpuIsa::kAvx512;
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
