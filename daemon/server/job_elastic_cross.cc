// SPDX-License-Identifier: Apache-2.0
// Job, elastic side of a job spanning daemons (the membership itself is the
// CrossNode's: daemon/peer/cross_node_elastic.cc). The leader decides each
// epoch; every node applies it the same way as a one-node elastic job does
// (enterEpochLocked): what was in flight fails as retriable, the local
// ranks are renumbered and told their place, and the next ring re-forms.
#include "daemon/common/logging.h"
#include "daemon/server/job.h"

namespace gradsync::server {

std::string Job::leadEpochLocked(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause,
                                 Outbox* outbox) {
  const int before = size_.load();
  auto change = cross_->beginEpoch(ranks, epoch, cause, spec_.min_size);
  if (!change.isOk()) {
    // NOT_FOUND: another report of the same loss came first.
    return change.status().code() == StatusCode::kNotFound ? "" : change.status().message();
  }
  enterEpochLocked(change->epoch(), {change->survivors().begin(), change->survivors().end()}, before, cause, outbox,
                   /*announce=*/true);
  return "";
}

void Job::crossRanksLost(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause) {
  Outbox outbox;
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty() || stopping_) return;
    failure = leadEpochLocked(ranks, epoch, cause, &outbox);
  }
  grant_cv_.notify_all();
  flush(&outbox);
  if (!failure.empty()) failJob(failure, /*node_lost=*/true);
}

void Job::onNewEpoch(const v1::NewEpoch& change) {
  Outbox outbox;
  std::string gap;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.empty() || stopping_ || change.epoch() <= epoch_) return;
    // Survivors are numbered as in the epoch before: only the next one applies.
    if (change.epoch() != epoch_ + 1) {
      gap = "job '" + spec_.job_id + "': the leader moved from epoch " + std::to_string(epoch_) + " to " +
            std::to_string(change.epoch()) + " without telling this node the epochs between";
    } else {
      enterEpochLocked(change.epoch(), {change.survivors().begin(), change.survivors().end()}, size_.load(),
                       change.cause(), &outbox, /*announce=*/true);
    }
  }
  grant_cv_.notify_all();
  flush(&outbox);
  if (!gap.empty()) failJob(gap, /*node_lost=*/true);
}

}  // namespace gradsync::server
