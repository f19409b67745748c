#include "tools/machine_floors.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define MINIMAKV_FLOORS_X86 1
#define MINIMAKV_FLOORS_AVX512 __attribute__((target("avx512f")))
#endif

namespace minimakv {
namespace {

constexpr int kRepeats = 5;  // the median of these is reported
// Independent FMA chains per thread: latency 4 cycles x 2 FMA ports needs >= 8 in flight; 16 leaves slack.
constexpr int kFmaChains = 16;
// The FMA loop runs in chunks of kFmaChunkIterations until each thread has spent kFmaSeconds of CPU time, so
// the measurement takes the same time in optimized and sanitizer builds.
constexpr int64_t kFmaChunkIterations = 1 << 16;
constexpr double kFmaSeconds = 0.05;

bool UseAvx512() {
  return cpu::UsableIsa(cpu::CpuIsa::kAvx512) == cpu::CpuIsa::kAvx512;
}

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Runs fn(t) on `threads` threads at once and returns the longest per-thread CPU time. CPU time, not wall
// time: on a machine shared with other jobs a thread that is descheduled for a while would otherwise make the
// hardware look slower than it is (the floor must not be inflated by someone else's load).
template <typename Fn>
double TimeOnThreads(int threads, const Fn& fn) {
  std::vector<double> cpu_seconds(static_cast<size_t>(threads));
  auto timed = [&](int t) {
    const double start = ThreadCpuSeconds();
    fn(t);
    cpu_seconds[size_t(t)] = ThreadCpuSeconds() - start;
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(timed, t);
  timed(0);
  for (std::thread& w : workers) w.join();
  return *std::max_element(cpu_seconds.begin(), cpu_seconds.end());
}

#if defined(MINIMAKV_FLOORS_X86)
MINIMAKV_FLOORS_AVX512 uint64_t ReadSliceAvx512(const uint8_t* data, size_t bytes) {
  __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm512_xor_si512(acc[k], _mm512_load_si512(data + i + 64 * k));
  }
  const __m512i all = _mm512_xor_si512(_mm512_xor_si512(acc[0], acc[1]), _mm512_xor_si512(acc[2], acc[3]));
  return uint64_t(_mm512_reduce_or_epi64(all));
}

MINIMAKV_FLOORS_AVX512 float FmaLoopAvx512(int64_t iterations) {
  __m512 acc[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm512_set1_ps(float(k));
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kFmaChains; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < kFmaChains; ++k) sum = _mm512_add_ps(sum, acc[k]);
  return _mm512_reduce_add_ps(sum);
}

// AMX bf16 peak: kAmxChains independent C tiles (TDPBF16PS latency is several times its issue interval), each
// step C[16x16] += A[16x32] * B[32x16], 8192 multiply-adds. Operands are zero: the tile unit's timing does not
// depend on values.
constexpr int kAmxChains = 4;
constexpr double kAmxMacsPerInstruction = 16.0 * 16.0 * 32.0;
void AmxLoop(int64_t iterations) {
  using namespace cpu::amx;  // kernels/cpu/amx_tiles.h: the tile primitives the AMX kernels use
  alignas(64) static const uint8_t zeros[kTileRows * kTileRowBytes] = {};
  LoadTileConfig(FullShapeTiles(kAmxChains + 2));  // C tiles 0-3, A tile 4, B tile 5
  TileZero<0>();
  TileZero<1>();
  TileZero<2>();
  TileZero<3>();
  TileLoad<4>(zeros, kTileRowBytes);
  TileLoad<5>(zeros, kTileRowBytes);
  for (int64_t i = 0; i < iterations; ++i) {
    TileDot<0, 4, 5>();
    TileDot<1, 4, 5>();
    TileDot<2, 4, 5>();
    TileDot<3, 4, 5>();
  }
  TileRelease();
}
#endif

uint64_t ReadSliceScalar(const uint8_t* data, size_t bytes) {
  uint64_t acc[4] = {0, 0, 0, 0};
  for (size_t i = 0; i + 32 <= bytes; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t word;
      std::memcpy(&word, data + i + 8 * k, sizeof word);
      acc[k] ^= word;
    }
  }
  return acc[0] ^ acc[1] ^ acc[2] ^ acc[3];
}

float FmaLoopScalar(int64_t iterations) {
  float acc[kFmaChains];
  for (int k = 0; k < kFmaChains; ++k) acc[k] = float(k);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kFmaChains; ++k) acc[k] = std::fma(acc[k], 0.999999f, 1e-7f);
  }
  float sum = 0.0f;
  for (float x : acc) sum += x;
  return sum;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Read buffers live on transparent huge pages, as the benchmark's KV pools do (tools/synthetic_kv.cpp), so a
// floor pays the same address translation per byte as the kernels it judges (4 KiB pages read 10-12% slower
// here: 16.4-16.7 against 18.4-18.5 GB/s, 1 GiB cold, 1 and 2 threads, 2026-11-30).
constexpr size_t kHugePageBytes = size_t(2) << 20;

using HugePageBuffer = std::unique_ptr<uint8_t, decltype(&std::free)>;

// At least `bytes`, rounded up to whole huge pages, every page touched (no page faults in a timed read);
// nullptr when the allocation fails.
HugePageBuffer AllocateHugePageBuffer(size_t bytes) {
  const size_t allocated = std::max<size_t>((bytes + kHugePageBytes - 1) / kHugePageBytes, 1) * kHugePageBytes;
  HugePageBuffer buffer(static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, allocated)), &std::free);
  if (buffer == nullptr) return buffer;
#if defined(MADV_HUGEPAGE)
  madvise(buffer.get(), allocated, MADV_HUGEPAGE);  // advisory: failure only costs speed
#endif
  std::memset(buffer.get(), 1, allocated);
  return buffer;
}

// Sustained read bandwidth with `threads` threads over a buffer of about buffer_bytes (median of kRepeats
// sweeps, each thread timed by its CPU time); *measured_bytes is the size actually read.
Status MeasureReadBandwidth(int threads, size_t buffer_bytes, bool avx512, std::vector<uint64_t>* sink,
                            double* bytes_per_s, size_t* measured_bytes) {
  constexpr size_t kAlign = 64;
  buffer_bytes = std::max<size_t>(buffer_bytes / (kAlign * 4 * size_t(threads)) * (kAlign * 4 * size_t(threads)),
                                  kAlign * 4 * size_t(threads));
  HugePageBuffer buffer = AllocateHugePageBuffer(buffer_bytes);
  if (buffer == nullptr) return Status::ResourceExhausted("cannot allocate " + std::to_string(buffer_bytes) + " bytes");
  const size_t slice = buffer_bytes / size_t(threads);
  std::vector<double> read_seconds;
  for (int r = 0; r < kRepeats; ++r) {
    read_seconds.push_back(TimeOnThreads(threads, [&](int t) {
      const uint8_t* data = buffer.get() + size_t(t) * slice;
#if defined(MINIMAKV_FLOORS_X86)
      (*sink)[size_t(t)] = avx512 ? ReadSliceAvx512(data, slice) : ReadSliceScalar(data, slice);
#else
      (*sink)[size_t(t)] = ReadSliceScalar(data, slice);
#endif
    }));
  }
  *measured_bytes = buffer_bytes;
  *bytes_per_s = double(buffer_bytes) / Median(read_seconds);
  return Status::Ok();
}

}  // namespace

Status MeasureMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors) {
  if (threads < 1) return Status::InvalidArgument("threads " + std::to_string(threads) + " must be >= 1");
  const bool avx512 = UseAvx512();
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  floors->read_bytes_per_s = 0.0;
  floors->buffer_bytes = 0;
  if (buffer_bytes > 0) {
    MINIMAKV_RETURN_IF_ERROR(
        MeasureReadBandwidth(threads, buffer_bytes, avx512, &sink, &floors->read_bytes_per_s, &floors->buffer_bytes));
  }
  std::vector<float> fma_sink(static_cast<size_t>(threads));
  std::vector<int64_t> iterations(static_cast<size_t>(threads));
  std::vector<double> fma_rates;  // multiply-adds per second of all threads together
  const double lanes = avx512 ? 16.0 : 1.0;
  for (int r = 0; r < kRepeats; ++r) {
    const double seconds = TimeOnThreads(threads, [&](int t) {
      const double start = ThreadCpuSeconds();
      int64_t done = 0;
      do {
#if defined(MINIMAKV_FLOORS_X86)
        fma_sink[size_t(t)] += avx512 ? FmaLoopAvx512(kFmaChunkIterations) : FmaLoopScalar(kFmaChunkIterations);
#else
        fma_sink[size_t(t)] += FmaLoopScalar(kFmaChunkIterations);
#endif
        done += kFmaChunkIterations;
      } while (ThreadCpuSeconds() - start < kFmaSeconds);
      iterations[size_t(t)] = done;
    });
    double macs = 0.0;
    for (int64_t n : iterations) macs += double(n) * kFmaChains * lanes;
    fma_rates.push_back(macs / seconds);
  }
  floors->threads = threads;
  floors->fma_macs_per_s = Median(fma_rates);
  floors->fma_isa = avx512 ? "avx512" : "scalar";
  floors->amx_bf16_macs_per_s = 0.0;
#if defined(MINIMAKV_FLOORS_X86)
  if (cpu::UsableIsa(cpu::CpuIsa::kAmx) == cpu::CpuIsa::kAmx) {
    std::vector<double> amx_rates;
    for (int r = 0; r < kRepeats; ++r) {
      const double seconds = TimeOnThreads(threads, [&](int t) {
        const double start = ThreadCpuSeconds();
        int64_t done = 0;
        do {
          AmxLoop(kFmaChunkIterations);
          done += kFmaChunkIterations;
        } while (ThreadCpuSeconds() - start < kFmaSeconds);
        iterations[size_t(t)] = done;
      });
      double macs = 0.0;
      for (int64_t n : iterations) macs += double(n) * kAmxChains * kAmxMacsPerInstruction;
      amx_rates.push_back(macs / seconds);
    }
    floors->amx_bf16_macs_per_s = Median(amx_rates);
  }
#endif
  // Keep the sinks observable so the loops are not optimized away.
  if (sink[0] == 0x5A5A5A5A5A5A5A5Aull && fma_sink[0] == -1.0f) return Status::Internal("impossible sink value");
  return Status::Ok();
}

Status CachedMachineFloors(int threads, size_t buffer_bytes, MachineFloors* floors) {
  static std::mutex mutex;
  static std::map<std::pair<int, size_t>, MachineFloors> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find({threads, buffer_bytes});
  if (it == cache.end()) {
    MachineFloors measured;
    MINIMAKV_RETURN_IF_ERROR(MeasureMachineFloors(threads, buffer_bytes, &measured));
    it = cache.emplace(std::make_pair(threads, buffer_bytes), measured).first;
  }
  *floors = it->second;
  return Status::Ok();
}

Status ReadSweep::Create(size_t bytes, std::unique_ptr<ReadSweep>* out) {
  if (bytes == 0) return Status::InvalidArgument("read sweep bytes must be > 0");
  const size_t chunks = std::max<size_t>(bytes / kChunkBytes, 1);
  std::unique_ptr<ReadSweep> sweep(new ReadSweep());
  sweep->bytes_ = chunks * kChunkBytes;
  HugePageBuffer buffer = AllocateHugePageBuffer(sweep->bytes_);
  if (buffer == nullptr) {
    return Status::ResourceExhausted("cannot allocate " + std::to_string(sweep->bytes_) + " bytes for a read sweep");
  }
  sweep->data_ = buffer.release();
  sweep->avx512_ = UseAvx512();
  sweep->chunk_sinks_.reset(new uint64_t[chunks]());
  *out = std::move(sweep);
  return Status::Ok();
}

ReadSweep::~ReadSweep() { std::free(data_); }

double ReadSweep::Run(ThreadPool& pool) {
  const int64_t chunks = int64_t(bytes_ / kChunkBytes);
  auto read = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const uint8_t* chunk = data_ + size_t(c) * kChunkBytes;
#if defined(MINIMAKV_FLOORS_X86)
      chunk_sinks_[size_t(c)] = avx512_ ? ReadSliceAvx512(chunk, kChunkBytes) : ReadSliceScalar(chunk, kChunkBytes);
#else
      chunk_sinks_[size_t(c)] = ReadSliceScalar(chunk, kChunkBytes);
#endif
    }
  };
  const auto start = std::chrono::steady_clock::now();
  pool.ParallelForEach(chunks, 1, read);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Keep the sinks observable so the reads are not optimized away.
  uint64_t all = 0;
  for (int64_t c = 0; c < chunks; ++c) all ^= chunk_sinks_[size_t(c)];
  static volatile uint64_t observed = 0;
  observed = observed ^ all;
  return seconds;
}

}  // namespace minimakv
