// SPDX-License-Identifier: Apache-2.0
// Job, its side of the cached steady state across daemons (SteadyRounds):
// local requests that repeat a cached collective are held by the rounds
// instead of going to the leader, and what the rounds ask of the job (its
// batches, its failure) as their Host.
#include <unistd.h>

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/peer/fast_rounds.h"
#include "daemon/server/job.h"

namespace gradsync::server {

void Job::wakeExecutorLocked() {
  ready_cv_.notify_one();
  if (wake_fd_.get() >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
  }
}

void Job::buildSteadyRounds() {
  SteadyRounds::Cache cache;
  cache.id = [cross = cross_.get()](const coordinator::Request& request) { return cross->cachedId(request); };
  cache.response = [cross = cross_.get()](uint64_t id) { return cross->cachedResponse(id); };
  rounds_ = std::make_unique<SteadyRounds>(spec_.job_id, limits_.transfer_timeout, std::move(cache));
}

bool Job::holdSteadyLocked(const std::shared_ptr<Session>& session, coordinator::Request& request) {
  if (!rounds_ || !session) return false;
  const auto is_local = [this](int rank) GS_REQUIRES(mutex_) { return ranks_.registeredHere(rank); };
  switch (rounds_->hold(session, request, is_local)) {
    case SteadyRounds::Hold::kNot:
      return false;
    case SteadyRounds::Hold::kReady:
      wakeExecutorLocked();
      return true;
    case SteadyRounds::Hold::kHeld:
      return true;
  }
  return false;
}

void Job::steadyExecutorLoop() {
  // The membership is fixed (not elastic). Rounds among the daemons need
  // endpoints to every one; rounds through the leader, the streams alone.
  const auto deadline = Clock::now() + limits_.join_timeout + std::chrono::seconds(5);
  if (!cross_->waitFormed(deadline)) return;  // the usual loop runs (or fails) the job
  std::unique_ptr<peer::FastRounds> among_daemons;
  SteadyRounds::Part part;
  const char* how = "among";
  if (cross_->steadyStateRounds()) {
    auto mesh = cross_->endpoints().mesh(collective::TransferId::control(0), deadline, 1, {});
    if (!mesh.isOk() || !*mesh) return;
    among_daemons = std::make_unique<peer::FastRounds>(**mesh);
    part.rounds = among_daemons.get();
    part.message_bytes = peer::FastRounds::messageBytes();
    cross_->endpoints().sayGoodbyeAtTheEnd();
  } else if ((part.rounds = cross_->leaderRounds()) != nullptr) {
    how = "through the leader among";
  } else {
    return;
  }
  part.members = cross_->members();
  part.leader = cross_->isLeader();
  part.wake_fd = wake_fd_.get();
  GS_LOG(executor, info, "job '{}': cached collectives run after rounds {} the {} daemons", spec_.job_id, how,
         part.members.size());
  rounds_->run(*this, std::move(part));
}

SteadyRounds::Host::Look Job::beforeRound(bool leader, Clock::duration hold_limit) {
  Look look;
  RankMessages to_ranks;
  std::vector<coordinator::Response> errors;  // follower: requests the leader failed (no ring)
  {
    MutexLock lock(mutex_);
    if (stopping_ || !failure_.empty()) {
      look.ended = true;
      return look;
    }
    for (auto& held : rounds_->takeOverdue(hold_limit)) {
      std::vector<coordinator::Response> unused;
      submitToCoordinator(held.session, std::move(held.request), &to_ranks, &unused, /*steady=*/false);
    }
    errors = queue_.takeErrors();
    if (!errors.empty()) beginBatchLocked();
    look.led_waiting = leader && !queue_.ready().empty();
  }
  flush(&to_ranks);
  if (!errors.empty()) {
    runBatch(std::move(errors), 0);
    batchFinished();
  }
  return look;
}

SteadyRounds::Host::Led Job::takeLed(bool leader) {
  Led led;
  {
    MutexLock lock(mutex_);
    if (leader) {
      led.batch = std::move(queue_.nextLed().responses);
      if (!led.batch.empty()) beginBatchLocked();
      led.part.sequence = queue_.lastSequence();
    }
    led.part.fusion_threshold_bytes = tuning_.current().fusion_threshold_bytes;
  }
  if (!led.batch.empty()) {
    Status sent = cross_->broadcast(led.batch, led.part.sequence, batch_.epoch, batch_.fusion_threshold_bytes);
    if (!sent.isOk()) {
      for (auto& r : led.batch) r.status = sent;
      failJob(sent.message(), /*node_lost=*/true);
    }
  }
  return led;
}

void Job::batchFinished() {
  MutexLock lock(mutex_);
  queue_.finished();
}

bool Job::runAgreed(const std::vector<uint64_t>& ids, uint64_t fusion_threshold_bytes, uint64_t sequence) {
  if (ids.empty()) return true;
  std::vector<coordinator::Response> agreed;
  {
    MutexLock lock(mutex_);
    if (!failure_.empty()) {
      // The round completed, but the job failed meanwhile: this daemon's
      // held requests were failed, and the other daemons run them.
      lock.unlock();
      leaveAgreedCollectives();
      return false;
    }
    agreed = rounds_->takeRunnable(ids);
    if (agreed.empty()) return true;
    queue_.begin(agreed.size());
    beginBatchLocked(fusion_threshold_bytes);
  }
  runBatch(std::move(agreed), sequence);
  batchFinished();
  return true;
}

void Job::roundsBroke(const Status& status) { (void)ringFailed(status); }

void Job::roundsEnded(std::vector<SteadyRounds::Held> left) {
  // The usual loop fails what comes after.
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    for (auto& held : left) {
      failRequestLocked(held.request,
                        aborted("job '" + spec_.job_id + "': " + (failure_.empty() ? stop_reason_ : failure_)),
                        &to_ranks);
    }
  }
  flush(&to_ranks);
}

void Job::leaveAgreedCollectives() {
  std::string failure;
  {
    MutexLock lock(mutex_);
    failure = failure_;
  }
  if (!failure.empty()) failJob(failure, /*node_lost=*/true);
}

bool Job::endedByTheJobsFailure(const Status& status) {
  if (status.code() != StatusCode::kAborted) return false;
  MutexLock lock(mutex_);
  return !failure_.empty() || stopping_;
}

bool Job::runLeaderBatchesUpTo(uint64_t sequence) {
  for (;;) {
    std::vector<coordinator::Response> batch;
    uint64_t next = 0;
    {
      MutexLock lock(mutex_);
      const auto due = [&]() GS_REQUIRES(mutex_) { return stopping_ || !failure_.empty() || queue_.reached(sequence); };
      // The leader sent it before the round began: it is on its way.
      if (!ready_cv_.wait_for(lock, limits_.transfer_timeout, due)) {
        lock.unlock();
        failJob("batch " + std::to_string(sequence) + " of the leader never arrived", /*node_lost=*/true);
        return false;
      }
      if (stopping_ || !failure_.empty()) return false;
      std::optional<BatchQueue::Batch> due_now = queue_.takeRemoteUpTo(sequence);
      if (!due_now) return true;
      next = due_now->sequence;
      beginBatchLocked(due_now->fusion_threshold_bytes);
      awaiting_.batchStarts(due_now->responses);
      batch = std::move(due_now->responses);
    }
    runBatch(std::move(batch), next);
    batchFinished();
  }
}

}  // namespace gradsync::server
