// ThreadPool: a fixed set of worker threads for data-parallel loops: the model runtime's (matmuls, attention
// heads) and CPU decode attention's (CpuAttentionOptions::pool), so a decode step does not start threads.
// ParallelFor(n, fn) runs fn(i) for i in [0, n) on the workers plus the calling thread and returns when all
// are done. Workers spin briefly before sleeping: a decode step issues hundreds of short loops, and a
// condition-variable wake-up per loop would cost more than the loop on a 2-core machine.
// The callable is passed by reference through a two-pointer RangeFn (no std::function, no heap allocation
// per loop: a decode step issues ~250 of them).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace minimakv {

// The most threads a call or session may ask for; the entry points that take a thread count (CpuAttentionOptions,
// SessionOptions, the bench and fidelity tools) refuse more with an InvalidArgument naming the count.
inline constexpr int kMaxThreads = 4096;

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means no worker threads. If the system refuses a thread (a thread
  // or process limit), the pool keeps the workers it has started and num_threads() says how many threads run:
  // the loops run on fewer threads instead of the exception ending the process.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return int(workers_.size()) + 1; }
  // fn(begin, end) over contiguous chunks of [0, n); chunk boundaries are multiples of `grain`.
  template <class Fn>
  void ParallelFor(int64_t n, int64_t grain, Fn&& fn) {
    Run(n, grain, /*one_grain_per_chunk=*/false, RangeFn(fn));
  }
  // fn(begin, end) over chunks of exactly `grain` indices (the last may be shorter), handed out in index
  // order: for uneven items (causal attention tiles) ordered heaviest first, so the threads finish together.
  template <class Fn>
  void ParallelForEach(int64_t n, int64_t grain, Fn&& fn) {
    Run(n, grain, /*one_grain_per_chunk=*/true, RangeFn(fn));
  }

 private:
  // A non-owning reference to a callable taking (int64_t begin, int64_t end).
  struct RangeFn {
    RangeFn() = default;
    template <class F>
    explicit RangeFn(F& f)
        : object(const_cast<void*>(static_cast<const void*>(&f))),
          call([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
    void* object = nullptr;
    void (*call)(void*, int64_t, int64_t) = nullptr;
  };

  void Run(int64_t n, int64_t grain, bool one_grain_per_chunk, RangeFn fn);
  void WorkerLoop();
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_workers_{0};
  std::atomic<int64_t> next_chunk_{0};
  int64_t num_chunks_ = 0;
  int64_t chunk_size_ = 0;
  int64_t n_ = 0;
  RangeFn fn_;
  bool stop_ = false;
};

}  // namespace minimakv
