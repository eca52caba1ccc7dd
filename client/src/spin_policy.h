// SPDX-License-Identifier: Apache-2.0
// How long a waiting call polls for its completion before it sleeps.
// Polling pays where completions come within the spin (one node: a 4 B
// allreduce of 2 ranks in 8 us polling, 75 us asleep); where they take
// longer (across daemons: 150 us and more) it only burns a core the daemons
// could use. So: the configured spin while spins pay; after kMissLimit
// misses in a row, only every kProbeEvery-th wait spins, to notice when
// they pay again. Not thread-safe: the caller serialises.
#pragma once

#include <chrono>
#include <cstdint>

namespace gradsync::client {

class SpinPolicy {
 public:
  static constexpr int kMissLimit = 8;
  static constexpr uint64_t kProbeEvery = 16;

  explicit SpinPolicy(std::chrono::microseconds spin) : spin_(spin) {}

  // The spin for the next wait.
  std::chrono::microseconds next() {
    ++waits_;
    if (misses_ < kMissLimit || waits_ % kProbeEvery == 0) return spin_;
    return std::chrono::microseconds(0);
  }

  // A wait that spun `spun` ended after `waited`: a hit when within the spin.
  void record(std::chrono::microseconds spun, std::chrono::nanoseconds waited) {
    if (spun.count() <= 0) return;  // nothing learned
    misses_ = waited <= spun ? 0 : (misses_ < kMissLimit ? misses_ + 1 : kMissLimit);
  }

 private:
  const std::chrono::microseconds spin_;
  int misses_ = 0;
  uint64_t waits_ = 0;
};

}  // namespace gradsync::client
