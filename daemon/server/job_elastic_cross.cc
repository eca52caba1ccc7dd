// SPDX-License-Identifier: Apache-2.0
// Job, elastic side of a job spanning daemons (the membership itself is the
// CrossNode's: daemon/peer/leader_side.cc). The leader decides each
// epoch; every node applies it the same way as a one-node elastic job does
// (enterEpochLocked): what was in flight fails as retriable, the local
// ranks are renumbered and told their place, and the next ring re-forms.
//
// Joiners: a new rank registers with its own node's daemon; a follower
// reports it to the leader once its stream is open. The leader marks the
// next commit barrier as admitting (before it sends the batch, so every
// node's Dones say so) and, once the barrier completed, starts the epoch
// that numbers the joiners after the survivors.
#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/server/job.h"
#include "daemon/server/job_place.h"

namespace gradsync::server {

std::string Job::leadEpochLocked(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause,
                                 RankMessages* to_ranks) {
  auto change = cross_->beginEpoch(ranks, epoch, cause);
  if (!change.isOk()) {
    // NOT_FOUND: another report of the same loss came first.
    return change.status().code() == StatusCode::kNotFound ? "" : change.status().message();
  }
  applyNewEpochLocked(*change, to_ranks);
  return "";
}

void Job::crossRanksLost(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause) {
  RankMessages to_ranks;
  std::string failure;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty() || stopping_) return;
    failure = leadEpochLocked(ranks, epoch, cause, &to_ranks);
  }
  state_cv_.notify_all();
  flush(&to_ranks);
  if (!failure.empty()) failJob(failure, /*node_lost=*/true);
}

std::vector<int> Job::applyNewEpochLocked(const v1::NewEpoch& change, RankMessages* to_ranks) {
  Admitted admitted;
  std::vector<int> vanished;
  for (const auto& entry : change.admitted()) {
    if (entry.peer_address() != limits_.peer_address) continue;
    std::shared_ptr<Session> joiner = ranks_.takeJoiner(entry.joiner_id());
    if (!joiner) {
      vanished.push_back(entry.rank());
      continue;
    }
    admitted.emplace_back(entry.rank(), std::move(joiner));
  }
  // Below the minimum no rank is told its place: they wait (in rejoin) for
  // the epoch that admits enough joiners, or for the leader's timeout.
  enterEpochLocked(change.epoch(), {change.survivors().begin(), change.survivors().end()}, admitted,
                   change.survivors_size() + change.admitted_size(), negotiation_.size(), change.cause(), to_ranks,
                   /*announce=*/!change.below_minimum());
  if (!change.below_minimum()) {
    epochs_.filled();
  } else {
    epochs_.waitBelowMinimum(Clock::now());
  }
  return vanished;
}

void Job::onNewEpoch(const v1::NewEpoch& change) {
  RankMessages to_ranks;
  std::string gap;
  std::vector<int> vanished;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty() || stopping_ || change.epoch() <= epochs_.current()) return;
    // Survivors are numbered as in the epoch before: only the next one
    // applies, unless this node held no rank (it joins the job now).
    if (change.epoch() != epochs_.current() + 1 && ranks_.count() > 0) {
      gap = "job '" + spec_.job_id + "': the leader moved from epoch " + std::to_string(epochs_.current()) + " to " +
            std::to_string(change.epoch()) + " without telling this node the epochs between";
    } else {
      vanished = applyNewEpochLocked(change, &to_ranks);
    }
  }
  state_cv_.notify_all();
  flush(&to_ranks);
  if (!gap.empty()) failJob(gap, /*node_lost=*/true);
  // A joiner that left between its report and its admission: lost at once.
  for (int rank : vanished) {
    cross_->reportRankLost(rank, change.epoch(),
                           "a joining rank (" + std::to_string(rank) + ") left before its admission");
  }
}

bool Job::joinersWaitingLocked() const { return cross_->hasPendingJoiners() || ranks_.readyJoinerCount() > 0; }

void Job::markAdmissionLocked(std::vector<coordinator::Response>* batch) {
  if (!spec_.elastic || !cross_ || !failure_.empty() || stopping_) return;
  if (!joinersWaitingLocked()) return;
  for (auto& response : *batch) {
    if (!isCommitBarrier(response)) continue;
    response.admits_joiners = true;
    return;
  }
}

void Job::admitAcrossLocked(const std::string& when, RankMessages* to_ranks) {
  auto change = cross_->admitJoiners(ranks_.readyJoinerIds(), when);
  if (!change.isOk()) {
    GS_LOG(control, warn, "job '{}': new ranks were to join {}: {}", spec_.job_id, when, change.status().message());
    return;
  }
  applyNewEpochLocked(*change, to_ranks);
}

void Job::reportJoiners() {
  std::vector<std::shared_ptr<Session>> ready;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty() || stopping_) return;
    ready = place().joinersToReportLocked(*this);
  }
  for (const auto& joiner : ready) cross_->reportJoiner(joiner->id(), joiner->pid(), joiner->describe());
}

}  // namespace gradsync::server
