// SPDX-License-Identifier: Apache-2.0
// The epochs of an elastic job on this daemon: the current one, the history
// of changes (gradsyncctl jobs), when the current one began (its recovery
// time is to its first collective that succeeds), whether it is ending (a
// local rank was lost and the leader's next epoch is on its way), the wait
// of an epoch below the job's minimum size, and the commits completed.
// Pure state: the Job guards it with its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::server {

class EpochLog {
 public:
  using Clock = std::chrono::steady_clock;

  uint64_t current() const { return epoch_; }
  // Moves to epoch `next` (`failed`: collectives of the old one failed).
  void enter(uint64_t next, const std::string& cause, int size_before, int size_after, int failed,
             Clock::time_point now);
  // A collective of `epoch` succeeded at `now`: the first one sets the
  // epoch's recovery time.
  void succeeded(uint64_t epoch, Clock::time_point now);
  // The epoch waiting below the minimum took `admitted` new ranks before
  // anyone used it: it has `size` now.
  void grew(int admitted, int size);
  const std::vector<v1::EpochChange>& history() const { return history_; }
  // The cause of the last change ("" before any).
  std::string lastCause() const { return history_.empty() ? "" : history_.back().cause(); }

  bool ending() const { return ending_; }
  void markEnding() { ending_ = true; }

  // Whether the current epoch waits below the minimum for new ranks, and
  // since when (set once: a second call keeps the first time).
  void waitBelowMinimum(Clock::time_point now);
  void filled() { below_minimum_since_.reset(); }
  bool belowMinimum() const { return below_minimum_since_.has_value(); }
  // Below the minimum for at least `timeout` at `now`.
  bool belowMinimumFor(Clock::duration timeout, Clock::time_point now) const;
  // "the elastic job stayed below its minimum of M ranks for N s (S ranks,
  // no new rank came; last change: ...)".
  std::string belowMinimumFailure(int min_size, int size, Clock::time_point now) const;

  void countCommit() { ++commits_; }
  uint64_t commits() const { return commits_; }

 private:
  uint64_t epoch_ = 1;
  std::vector<v1::EpochChange> history_;
  Clock::time_point started_ = Clock::now();
  bool ending_ = false;
  std::optional<Clock::time_point> below_minimum_since_;
  uint64_t commits_ = 0;
};

}  // namespace gradsync::server
