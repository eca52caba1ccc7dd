// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/log_limit.h"

namespace gradsync {

bool LogSite::admit(const std::string& message, Clock::time_point now, uint64_t* dropped) {
  MutexLock lock(mutex_);
  auto it = recent_.find(message);
  if (it != recent_.end() && now - it->second.last < kInterval) {
    ++it->second.dropped;
    return false;
  }
  if (it == recent_.end()) {
    if (recent_.size() >= kMaxMessages) {
      for (auto e = recent_.begin(); e != recent_.end();) {
        e = now - e->second.last >= kInterval ? recent_.erase(e) : std::next(e);
      }
    }
    it = recent_.emplace(message, Entry{}).first;
  }
  *dropped = it->second.dropped;
  it->second.dropped = 0;
  it->second.last = now;
  return true;
}

}  // namespace gradsync
