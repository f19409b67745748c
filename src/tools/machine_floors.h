// Physical floors of this machine, measured (not taken from a spec sheet), so benchmarks can say how far a
// kernel is from what the hardware allows:
//   memory floor   = bytes read / sustained read bandwidth (a buffer far larger than the last-level cache)
//   compute floor  = multiply-adds / fp32 FMA peak (independent AVX-512 FMA chains, or a scalar fallback), or
//                    for the AMX kernels multiply-adds / AMX bf16 peak (independent TDPBF16PS chains)
// Both are timed with per-thread CPU time (the longest thread), so other jobs on a shared machine do not make
// the hardware look slower than it is.
//
// The read bandwidth of this VM moves by 20% and more within minutes (docs/cpu-notes.md), so a
// floor measured once before a benchmark judges its paths against another moment's memory system. ReadSweep
// is the same read measurement made cheap enough to repeat in every timing round of `minimakv bench`, right
// next to the paths it judges (decode_bench.cpp, RunDecodeBench). The compute peaks are still measured once:
// they move too (2 threads, 8 measurements over 2 minutes on 2026-11-30: FMA 154-175 GMAC/s, AMX bf16 2.0-2.9
// TMAC/s, against 14-33 GB/s read in the same minutes), but at the benchmark's decode shapes the memory floor
// is the larger one by ~2.7x (BF16 on FMA) to 10-20x (AMX), so they do not set ratio_to_floor there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "minimakv/status.h"
#include "minimakv/thread_pool.h"

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
// buffer_bytes 0: only the compute peaks are measured (read_bytes_per_s and buffer_bytes stay 0), for callers
// that measure the bandwidth themselves with a ReadSweep.
Status MeasureMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors);

// The same, measured once per (thread count, buffer size) per process and then reused.
Status CachedMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors);

// One buffer read start to end by the threads of a pool, timed by wall clock: the memory floor's measurement
// on the same pool (so the same threads and the same wake-up path) as the kernels it is compared with. The
// buffer is split into ReadSweep::kChunkBytes chunks handed out in order, so a thread that starts late reads
// fewer chunks instead of leaving the other to read alone at the end. Memory as the synthetic KV pools
// (tools/synthetic_kv.cpp): 2 MiB aligned and advised to use transparent huge pages.
// Run() reads cold data only if the buffer was evicted since its last read (the caller flushes the caches).
class ReadSweep {
 public:
  static constexpr size_t kChunkBytes = size_t(1) << 20;
  // `bytes` is rounded down to whole chunks, at least one; InvalidArgument for 0, ResourceExhausted when the
  // allocation fails.
  static Status Create(size_t bytes, std::unique_ptr<ReadSweep>* out);
  ~ReadSweep();
  ReadSweep(const ReadSweep&) = delete;
  ReadSweep& operator=(const ReadSweep&) = delete;

  // Reads every byte once on pool's threads (the calling thread included); returns the wall seconds.
  double Run(ThreadPool& pool);
  size_t bytes() const { return bytes_; }

 private:
  ReadSweep() = default;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool avx512_ = false;
  std::unique_ptr<uint64_t[]> chunk_sinks_;  // one XOR per chunk, so the reads cannot be optimized away
};

}  // namespace minimakv
