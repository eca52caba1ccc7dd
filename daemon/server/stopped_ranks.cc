// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/stopped_ranks.h"

namespace gradsync::server {

std::vector<uint64_t> StoppedRanks::review(const std::vector<uint64_t>& stopped_now,
                                           coordinator::Clock::time_point now) {
  MutexLock lock(mutex_);
  std::map<uint64_t, coordinator::Clock::time_point> still;
  std::vector<uint64_t> too_long;
  for (uint64_t id : stopped_now) {
    auto it = since_.find(id);
    const auto since = it == since_.end() ? now : it->second;
    still[id] = since;
    if (now - since >= limit_) too_long.push_back(id);
  }
  since_ = std::move(still);
  return too_long;
}

}  // namespace gradsync::server
