// SPDX-License-Identifier: Apache-2.0
// A fixed set of threads that split one data-parallel pass with the caller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gradsync::executor {

class ReducePool {
 public:
  // `threads` counts the caller: threads - 1 workers are started.
  explicit ReducePool(int threads);
  ~ReducePool();
  ReducePool(const ReducePool&) = delete;
  ReducePool& operator=(const ReducePool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(0) .. fn(shards - 1), spread over the workers and the caller;
  // returns when all have run. One pass at a time: concurrent callers are
  // serialised. fn must not throw.
  void forEachShard(size_t shards, const std::function<void(size_t)>& fn);

 private:
  void workerLoop();
  void drain();

  std::mutex pass_mutex_;  // one pass at a time
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t shards_ = 0;
  std::atomic<size_t> next_{0};
  size_t finished_ = 0;
  int active_workers_ = 0;  // workers inside the current pass
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace gradsync::executor
