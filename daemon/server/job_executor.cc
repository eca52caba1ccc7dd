// SPDX-License-Identifier: Apache-2.0
// The executor side of Job: the thread that takes ready batches (leading
// them to the followers), and what becomes of a batch's results (Dones,
// tuning, counters). BatchRunner runs the batches.
#include <unistd.h>

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/server/done_messages.h"
#include "daemon/server/job.h"
#include "daemon/server/job_place.h"

namespace gradsync::server {

void Job::executorLoop() {
  if (rounds_) steadyExecutorLoop();
  for (;;) {
    driveUntilRunnable();
    std::optional<BatchQueue::Batch> next;
    {
      MutexLock lock(mutex_);
      next = nextBatchLocked(lock);
    }
    if (!next) return;
    if (next->lead) {
      Status sent = cross_->broadcast(next->responses, next->sequence, batch_.epoch, batch_.fusion_threshold_bytes);
      if (!sent.isOk()) {
        for (auto& r : next->responses) r.status = sent;  // fails them on this node; the job fails below
        failJob(sent.message(), /*node_lost=*/true);
      }
    }
    runBatch(std::move(next->responses), next->sequence);
    MutexLock lock(mutex_);
    queue_.finished();
  }
}

std::optional<BatchQueue::Batch> Job::nextBatchLocked(MutexLock& lock) {
  ready_cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return stopping_ || queue_.runnable(); });
  if (stopping_) return std::nullopt;
  const autotune::Settings tuned = tuning_.current();
  if (!queue_.hasRemote() && negotiation_.pendingCount() > 0 && tuned.cycle_time.count() > 0) {
    // The leader of a multi-node job (or one daemon, when autotune says
    // so): more tensors are on their way; give them one cycle to join this
    // batch.
    const auto until = Clock::now() + tuned.cycle_time;
    ready_cv_.wait_until(lock, until, [&]() GS_REQUIRES(mutex_) {
      return stopping_ || negotiation_.pendingCount() == 0 || queue_.bytesReady() >= tuned.fusion_threshold_bytes;
    });
    if (stopping_) return std::nullopt;
  }
  BatchQueue::Batch next = queue_.next(/*lead=*/cross_ != nullptr);
  beginBatchLocked(next.fusion_threshold_bytes);
  awaiting_.batchStarts(next.responses);
  if (next.lead) markAdmissionLocked(&next.responses);
  return next;
}

void Job::driveUntilRunnable() {
  if (!cross_) return;
  // The last bytes of the collective just run may still be queued here for
  // a neighbour (transport::Transport::idle). wakeExecutorLocked() writes
  // wake_fd_ after each change that may make a batch runnable.
  for (;;) {
    {
      MutexLock lock(mutex_);
      if (stopping_ || queue_.runnable()) return;
    }
    const bool driven = cross_->endpoints().idle({wake_fd_.get()}, Clock::now() + std::chrono::milliseconds(100));
    uint64_t drained;
    while (::read(wake_fd_.get(), &drained, sizeof drained) > 0) {
    }
    if (!driven) {  // no data plane yet: the condition alone
      MutexLock lock(mutex_);
      ready_cv_.wait_for(lock, std::chrono::milliseconds(100),
                         [&]() GS_REQUIRES(mutex_) { return stopping_ || queue_.runnable(); });
    }
  }
}

void Job::beginBatchLocked(uint64_t fusion_threshold_bytes) {
  tuning_.followLeader(fusion_threshold_bytes);  // (0: none came with the batch)
  batch_.fusion_threshold_bytes =
      fusion_threshold_bytes != 0 ? fusion_threshold_bytes : tuning_.current().fusion_threshold_bytes;
  batch_.sessions = ranks_.byRank();
  batch_.epoch = epochs_.current();
  if (cross_) batch_.local_ranks = ranks_.registered();  // one node: every rank is local
}

void Job::runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) {
  runner_->run(batch_, std::move(batch), sequence);
  batch_.sessions.clear();
}

void Job::fusedCompleted(const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results,
                         Clock::time_point started) {
  RankMessages to_ranks;
  {
    MutexLock lock(mutex_);
    const bool decides = decidesTuningLocked();
    const auto done = Clock::now();  // one time for the fused batch
    for (size_t i = 0; i < fused.responses.size(); ++i) {
      complete(fused.responses[i], results[i], started, &to_ranks);
      if (decides && results[i].status.isOk()) {
        tellTuningLocked(tuning_.completed(fused.responses[i].name, fused.responses[i].first().length, done),
                         &to_ranks);
      }
    }
    stats_.fused(fused.bytes);
    queue_.completed(fused.responses.size());
  }
  flush(&to_ranks);
}

void Job::tellTuningLocked(const std::vector<autotune::TuningEvent>& events, RankMessages* to_ranks) {
  for (const auto& event : events) {
    const v1::DaemonMessage message = tuningSample(event);
    for (const auto& [rank, session] : ranks_.byRank()) {
      if (session->identity().autotune_log) to_ranks->emplace_back(session, message);
    }
  }
}

void Job::complete(const coordinator::Response& response, const executor::ResponseResult& result,
                   Clock::time_point started, RankMessages* to_ranks) {
  const auto now = Clock::now();
  const bool admit = admitsJoinersLocked(response, result);
  if (result.status.isOk()) {
    stats_.collectiveDone();
    if (spec_.elastic && isCommitBarrier(response)) epochs_.countCommit();
  } else {
    stats_.failed(result.status.code(), result.status.message());
  }
  awaiting_.completed(response);  // one lock for the response, not one per rank
  const auto& sessions = batch_.sessions;
  for (size_t i = 0; i < response.requests.size(); ++i) {
    const auto& request = response.requests[i];
    // Other nodes' ranks (most of them, in a large job) are told apart first.
    if (!request || sessions.empty() || request->rank < sessions.begin()->first ||
        request->rank > sessions.rbegin()->first) {
      continue;
    }
    // The batch's own sessions: an elastic epoch change may have renumbered
    // the job's since (a lost rank's session still takes its Done quietly).
    auto it = sessions.find(request->rank);
    if (it == sessions.end()) continue;
    it->second->removeHandle(request->handle);
    // A failure in an epoch that has ended (or is ending: a rank of it was
    // lost) is the membership change's doing: retriable.
    v1::DaemonMessage message =
        responseDone(spec_.job_id, response, result, i, batch_.epoch != epochs_.current() || epochs_.ending(), admit);
    if (result.status.isOk()) {
      const DataType dtype = isDataless(response.type) ? v1::DATA_TYPE_UNSPECIFIED : request->dtype;
      stats_.done(response.type, dtype, request->length, request->received, started, now);
    }
    to_ranks->emplace_back(it->second, std::move(message));
  }
  if (result.status.isOk()) epochs_.succeeded(batch_.epoch, now);
  if (admit) place().commitAdmittedLocked(*this, response.name, to_ranks);
}

bool Job::decidesTuningLocked() const { return place().decidesTuningLocked(*this); }

}  // namespace gradsync::server
