// SPDX-License-Identifier: Apache-2.0
// A mutex, its scoped lock and a condition variable that Clang's
// thread-safety analysis understands (std::mutex carries no annotations in
// libstdc++). Same costs as std::mutex, std::unique_lock and
// std::condition_variable, which they wrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "base/thread_annotations.h"

namespace gradsync {

class GS_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void lock() GS_ACQUIRE() { mutex_.lock(); }
  void unlock() GS_RELEASE() { mutex_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds `mutex` from construction to destruction; unlock() and lock() let a
// function let go of it for a while (to call out without it).
class GS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) GS_ACQUIRE(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() GS_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  void unlock() GS_RELEASE() { lock_.unlock(); }
  void lock() GS_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable waited on with a MutexLock held. The predicates run
// with the mutex held: give a lambda that reads guarded members
// GS_REQUIRES(that mutex), e.g. `[&]() GS_REQUIRES(mutex_) { return done_; }`.
class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }
  void wait(MutexLock& lock) { cv_.wait(lock.lock_); }
  template <typename Predicate>
  void wait(MutexLock& lock, Predicate ready) {
    cv_.wait(lock.lock_, ready);
  }
  // True when `ready` holds (it may have come true at the deadline).
  template <typename Rep, typename Period, typename Predicate>
  bool wait_for(MutexLock& lock, const std::chrono::duration<Rep, Period>& timeout, Predicate ready) {
    return cv_.wait_for(lock.lock_, timeout, ready);
  }
  template <typename Clock, typename Duration, typename Predicate>
  bool wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline, Predicate ready) {
    return cv_.wait_until(lock.lock_, deadline, ready);
  }
  template <typename Clock, typename Duration>
  std::cv_status wait_until(MutexLock& lock, const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv_.wait_until(lock.lock_, deadline);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace gradsync
