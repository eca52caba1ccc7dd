// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/epoch_log.h"

#include <algorithm>

namespace gradsync::server {

void EpochLog::enter(uint64_t next, const std::string& cause, int size_before, int size_after, int failed,
                     Clock::time_point now) {
  epoch_ = next;
  started_ = now;
  ending_ = false;
  v1::EpochChange record;
  record.set_epoch(next);
  record.set_cause(cause);
  record.set_size_before(size_before);
  record.set_size_after(size_after);
  record.set_unix_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  record.set_failed_collectives(failed);
  history_.push_back(std::move(record));
}

void EpochLog::succeeded(uint64_t epoch, Clock::time_point now) {
  if (history_.empty() || history_.back().epoch() != epoch || history_.back().recovery_ms() != 0) return;
  history_.back().set_recovery_ms(
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(now - started_).count()));
}

void EpochLog::grew(int admitted, int size) {
  if (history_.empty()) return;
  v1::EpochChange& record = history_.back();
  record.set_size_after(size);
  record.set_cause(record.cause() + "; then admitted " + std::to_string(admitted) + " new ranks");
}

void EpochLog::waitBelowMinimum(Clock::time_point now) {
  if (!below_minimum_since_) below_minimum_since_ = now;
}

bool EpochLog::belowMinimumFor(Clock::duration timeout, Clock::time_point now) const {
  return below_minimum_since_ && now - *below_minimum_since_ >= timeout;
}

std::string EpochLog::belowMinimumFailure(int min_size, int size, Clock::time_point now) const {
  const auto waited =
      below_minimum_since_ ? std::chrono::duration_cast<std::chrono::seconds>(now - *below_minimum_since_).count() : 0;
  return "the elastic job stayed below its minimum of " + std::to_string(min_size) + " ranks for " +
         std::to_string(waited) + " s (" + std::to_string(size) +
         " ranks, no new rank came; last change: " + lastCause() + ")";
}

}  // namespace gradsync::server
