// ThreadPool: a fixed set of worker threads for the runtime's data-parallel loops (matmuls, attention heads).
// ParallelFor(n, fn) runs fn(i) for i in [0, n) on the workers plus the calling thread and returns when all
// are done. Workers spin briefly before sleeping: a decode step issues hundreds of short loops, and a
// condition-variable wake-up per loop would cost more than the loop on a 2-core machine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minimakv {

class ThreadPool {
 public:
  // num_threads counts the calling thread: 1 means no worker threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return int(workers_.size()) + 1; }
  // fn(begin, end) over contiguous chunks of [0, n); chunk boundaries are multiples of `grain`.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
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
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  bool stop_ = false;
};

}  // namespace minimakv
