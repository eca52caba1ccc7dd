// SPDX-License-Identifier: Apache-2.0
// The same log message from one call site at most once a second: a stuck
// peer or a client retrying in a loop must not flood the journal. The next
// copy let through after a quiet second says how many were dropped.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace gradsync {

class LogSite {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kInterval{1};

  // Whether `message` may be logged at `now`; when it may, `*dropped` is how
  // many copies of it were held back since it was last logged.
  bool admit(const std::string& message, Clock::time_point now, uint64_t* dropped);

 private:
  struct Entry {
    Clock::time_point last;
    uint64_t dropped = 0;
  };
  static constexpr size_t kMaxMessages = 256;  // past it, quiet entries are forgotten

  Mutex mutex_;
  std::unordered_map<std::string, Entry> recent_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync
