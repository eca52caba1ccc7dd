// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/failure_notices.h"

namespace gradsync::peer {

FailureNotices::Verdict FailureNotices::tell(bool node_lost, Route route) {
  MutexLock lock(mutex_);
  if (removed_) {
    const Verdict verdict = told_ ? Verdict::kToldAlready : Verdict::kRemoved;
    told_ = true;
    return verdict;
  }
  if (route == Route::kAroundTheLeader) {
    // What went to the leader alone may have died with it; what was heard
    // of a lost node came from a node that told every other.
    if (told_around_ || node_lost_heard_) return Verdict::kToldAlready;
    told_around_ = true;
    told_ = true;
    node_lost_told_ = true;
    return Verdict::kTell;
  }
  if (told_ && (node_lost_told_ || !node_lost)) return Verdict::kToldAlready;
  told_ = true;
  node_lost_told_ = node_lost_told_ || node_lost;
  return Verdict::kTell;
}

void FailureNotices::heard(bool node_lost) {
  MutexLock lock(mutex_);
  told_ = true;
  node_lost_told_ = node_lost_told_ || node_lost;
  node_lost_heard_ = node_lost_heard_ || node_lost;
}

void FailureNotices::removed() {
  MutexLock lock(mutex_);
  removed_ = true;
}

void FailureNotices::jobStopped() {
  MutexLock lock(mutex_);
  job_stopped_ = true;
}

bool FailureNotices::jobRunning() const {
  MutexLock lock(mutex_);
  return !job_stopped_;
}

bool FailureNotices::failureKnown() const {
  MutexLock lock(mutex_);
  return told_;
}

bool FailureNotices::nodeLost() const {
  MutexLock lock(mutex_);
  return node_lost_told_;
}

}  // namespace gradsync::peer
