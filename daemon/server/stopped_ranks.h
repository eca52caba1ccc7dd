// SPDX-License-Identifier: Apache-2.0
// Which of an elastic job's local ranks have had their process stopped
// (SIGSTOP, a debugger) for too long: such a rank would hold the job until
// the stall deadline, so the daemon removes it as lost. A rank counts from
// the first review that saw it stopped; one seen running again starts over.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/negotiator.h"

namespace gradsync::server {

class StoppedRanks {
 public:
  explicit StoppedRanks(coordinator::Clock::duration limit) : limit_(limit) {}

  // `stopped_now`: the sessions (by id) whose process is stopped at `now`;
  // every other is running. Returns those stopped for `limit` or longer.
  std::vector<uint64_t> review(const std::vector<uint64_t>& stopped_now, coordinator::Clock::time_point now)
      GS_EXCLUDES(mutex_);

 private:
  const coordinator::Clock::duration limit_;
  Mutex mutex_;
  std::map<uint64_t, coordinator::Clock::time_point> since_ GS_GUARDED_BY(mutex_);  // session id -> first seen
};

}  // namespace gradsync::server
