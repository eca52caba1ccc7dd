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

#include "base/mutex.h"
#include "base/thread_annotations.h"

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

  Mutex pass_mutex_;  // one pass at a time
  Mutex mutex_ GS_ACQUIRED_AFTER(pass_mutex_);
  CondVar work_cv_;
  CondVar done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t shards_ = 0;  // with fn_: changed only while no worker is inside a pass
  std::atomic<size_t> next_{0};
  size_t finished_ GS_GUARDED_BY(mutex_) = 0;
  int active_workers_ GS_GUARDED_BY(mutex_) = 0;  // workers inside the current pass
  uint64_t generation_ GS_GUARDED_BY(mutex_) = 0;
  bool stop_ GS_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace gradsync::executor
