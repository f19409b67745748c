// Google Benchmark for one decode step of the CPU attention paths (the same cases as `minimakv bench`, built by
// tools/decode_bench.h): shapes llama-3.1-8b and qwen3.6-27b, contexts 4K..64K, batch 1 and 4, 1 and 2
// threads, paths bf16 / fp8 / tq3 / minima. Caches are flushed before every timed step (manual timing covers
// the step only). Counters: GB/s of K/V payload, and the measured floors of tools/machine_floors.h.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "tools/decode_bench.h"
#include "tools/machine_floors.h"

namespace minimakv {
namespace {

struct CaseKey {
  std::string shape, path;
  int64_t context = 0;
  int batch = 0;
  bool operator==(const CaseKey& o) const {
    return shape == o.shape && path == o.path && context == o.context && batch == o.batch;
  }
};

// Benchmarks run in registration order with threads innermost, so one live case at a time is enough (the
// largest, qwen 64K x 4 in BF16, is 1 GiB).
DecodeBenchCase* GetCase(const CaseKey& key, std::string* error) {
  static CaseKey live_key;
  static std::unique_ptr<DecodeBenchCase> live;
  if (live != nullptr && live_key == key) return live.get();
  live.reset();
  DecodeShape shape;
  Status status = LookupDecodeShape(key.shape, &shape);
  if (status.ok()) status = DecodeBenchCase::Create(shape, key.path, key.context, key.batch, DecodeBenchConfig(), &live);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  live_key = key;
  return live.get();
}

void DecodeStep(benchmark::State& state, CaseKey key, int threads) {
  std::string error;
  DecodeBenchCase* bench = GetCase(key, &error);
  if (bench == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  MachineFloors floors;
  if (!CachedMachineFloors(threads, kDefaultFloorBufferBytes, &floors).ok()) {
    state.SkipWithError("floor measurement failed");
    return;
  }
  ThreadPool pool(threads);
  for (auto _ : state) {
    FlushCpuCaches();
    const auto start = std::chrono::steady_clock::now();
    const Status status = bench->Step(pool);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return;
    }
  }
  state.counters["kv_bytes"] = bench->kv_bytes_read();
  state.counters["GB/s"] = benchmark::Counter(bench->kv_bytes_read() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["floor_mem_us"] = bench->kv_bytes_read() / floors.read_bytes_per_s * 1e6;
  state.counters["floor_fma_us"] = bench->multiply_adds() / floors.fma_macs_per_s * 1e6;
}

void RegisterAll() {
  for (const char* shape : {"llama-3.1-8b", "qwen3.6-27b"}) {
    for (int64_t context : {4096, 16384, 32768, 65536}) {
      for (int batch : {1, 4}) {
        for (const char* path : {"bf16", "fp8", "tq3", "minima"}) {
          for (int threads : {1, 2}) {
            const std::string name = std::string(shape) + "/" + path + "/" + std::to_string(context) + "/b" +
                                     std::to_string(batch) + "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), DecodeStep, CaseKey{shape, path, context, batch}, threads)
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.5);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace minimakv

int main(int argc, char** argv) {
  minimakv::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
