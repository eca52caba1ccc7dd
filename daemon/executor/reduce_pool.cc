// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/reduce_pool.h"

namespace gradsync::executor {

ReducePool::ReducePool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { workerLoop(); });
}

ReducePool::~ReducePool() {
  {
    MutexLock lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ReducePool::drain() {
  // fn_ and shards_ only change while no worker is inside a pass (see
  // forEachShard), so reading them here without the lock is safe.
  size_t done = 0;
  for (size_t shard = next_.fetch_add(1); shard < shards_; shard = next_.fetch_add(1)) {
    (*fn_)(shard);
    ++done;
  }
  if (done == 0) return;
  MutexLock lock(mutex_);
  finished_ += done;
}

void ReducePool::forEachShard(size_t shards, const std::function<void(size_t)>& fn) {
  if (shards == 0) return;
  if (shards == 1 || workers_.empty()) {
    for (size_t i = 0; i < shards; ++i) fn(i);
    return;
  }
  MutexLock pass(pass_mutex_);
  {
    MutexLock lock(mutex_);
    fn_ = &fn;
    shards_ = shards;
    next_.store(0);
    finished_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  drain();
  MutexLock lock(mutex_);
  // Wait for the shards and for every worker to leave the pass, so that no
  // worker can touch fn_ or next_ of the next pass.
  done_cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return finished_ == shards_ && active_workers_ == 0; });
  fn_ = nullptr;
  shards_ = 0;
}

void ReducePool::workerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      MutexLock lock(mutex_);
      work_cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (fn_ == nullptr) continue;
      ++active_workers_;
    }
    drain();
    MutexLock lock(mutex_);
    --active_workers_;
    done_cv_.notify_all();
  }
}

}  // namespace gradsync::executor
