// Physical floors of this machine, measured (not taken from a spec sheet), so benchmarks can say how far a
// kernel is from what the hardware allows:
//   memory floor   = bytes read / sustained read bandwidth (a buffer far larger than the last-level cache)
//   compute floor  = multiply-adds / fp32 FMA peak (independent AVX-512 FMA chains, or a scalar fallback), or
//                    for the AMX kernels multiply-adds / AMX bf16 peak (independent TDPBF16PS chains)
// Both are timed with per-thread CPU time (the longest thread), so other jobs on a shared machine do not make
// the hardware look slower than it is.
#pragma once

#include <cstddef>

#include "minimakv/status.h"

namespace minimakv {

struct MachineFloors {
  int threads = 0;
  double read_bytes_per_s = 0.0;  // sustained read bandwidth with `threads` threads
  double fma_macs_per_s = 0.0;    // fp32 multiply-adds per second with `threads` threads
  size_t buffer_bytes = 0;        // size of the buffer the bandwidth was measured on
  const char* fma_isa = "";       // "avx512" or "scalar": which FMA loop ran
  double amx_bf16_macs_per_s = 0.0;  // bf16 multiply-adds per second of the AMX tile unit (TDPBF16PS) with
                                     // `threads` threads; 0 where the AMX kernels cannot run
};

// Default buffer for the bandwidth measurement: 1 GiB, several times a 300 MiB L3.
inline constexpr size_t kDefaultFloorBufferBytes = size_t(1) << 30;

// Measures both floors with `threads` threads (median of a few repeats). Takes about a second.
Status MeasureMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors);

// The same, measured once per (thread count, buffer size) per process and then reused.
Status CachedMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors);

}  // namespace minimakv
