// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_execution.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/peer/fast_rounds.h"
#include "daemon/server/done_messages.h"
#include "daemon/server/job_across_daemons.h"
#include "daemon/server/job_elastic.h"
#include "daemon/server/job_place.h"
#include "daemon/server/job_submission.h"

namespace gradsync::server {

Job::Execution::Execution(Job& job, executor::ReducePool* pool, peer::PeerDataPlane* peer_plane)
    : job_(job),
      gpu_executor_(job.limits_.gpus
                        ? std::make_unique<executor::GpuExecutor>(
                              &job.limits_.gpus->ops(), job.limits_.nccl_between_daemons ? job.limits_.nccl : nullptr)
                        : nullptr),
      executor_(pool, gpu_executor_.get()) {
  BatchRunner::Parts parts;
  parts.job_id = job.spec_.job_id;
  parts.executor = &executor_;
  parts.plane = peer_plane ? static_cast<executor::DataPlane*>(peer_plane) : &single_node_;
  parts.peer_plane = peer_plane;
  parts.grants = &job.outputs_;
  parts.timeline = &job.timeline_;
  parts.stats = &job.stats_;
  parts.grant_timeout = job.limits_.output_grant_timeout;
  runner_ = std::make_unique<BatchRunner>(
      std::move(parts), [this](const fusion::FusedResponse& fused, const std::vector<executor::ResponseResult>& results,
                               Clock::time_point started) { fusedCompleted(fused, results, started); });
  if (peer_plane) wake_fd_ = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

void Job::Execution::start() {
  thread_ = std::thread([this] {
    if (job_.rounds_) takePartInRounds();
    loop();
  });
}

void Job::Execution::join() {
  if (thread_.joinable()) thread_.join();
}

void Job::Execution::wake() {
  ready_cv_.notify_one();
  signalWakeFd();
}

void Job::Execution::wakeAll() {
  ready_cv_.notify_all();
  signalWakeFd();
}

void Job::Execution::signalWakeFd() {
  if (wake_fd_.get() < 0) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void Job::Execution::loop() {
  for (;;) {
    driveUntilRunnable();
    std::optional<BatchQueue::Batch> next;
    {
      MutexLock lock(job_.mutex_);
      next = nextBatchLocked(lock);
    }
    if (!next) return;
    if (next->lead) lead(next->responses, next->sequence);
    runBatch(std::move(next->responses), next->sequence);
    batchFinished();
  }
}

void Job::Execution::lead(std::vector<coordinator::Response>& batch, uint64_t sequence) {
  Status sent = job_.cross_->broadcast(batch, sequence, batch_.epoch, batch_.fusion_threshold_bytes);
  if (sent.isOk()) return;
  for (auto& r : batch) r.status = sent;  // fails them on this node; the job fails next
  job_.failJob(sent.message(), /*node_lost=*/true);
}

std::optional<BatchQueue::Batch> Job::Execution::nextBatchLocked(MutexLock& lock) {
  ready_cv_.wait(lock, [&]() GS_REQUIRES(job_.mutex_) { return job_.stopping_ || job_.queue_.runnable(); });
  if (job_.stopping_) return std::nullopt;
  const autotune::Settings tuned = job_.tuning_.current();
  if (!job_.queue_.hasRemote() && job_.negotiation_.pendingCount() > 0 && tuned.cycle_time.count() > 0) {
    // The leader of a multi-node job (or one daemon, when autotune says
    // so): more tensors are on their way; give them one cycle to join this
    // batch.
    const auto until = Clock::now() + tuned.cycle_time;
    ready_cv_.wait_until(lock, until, [&]() GS_REQUIRES(job_.mutex_) {
      return job_.stopping_ || job_.negotiation_.pendingCount() == 0 ||
             job_.queue_.bytesReady() >= tuned.fusion_threshold_bytes;
    });
    if (job_.stopping_) return std::nullopt;
  }
  BatchQueue::Batch next = job_.queue_.next(/*lead=*/job_.cross_ != nullptr);
  beginBatchLocked(job_, next.fusion_threshold_bytes);
  job_.awaiting_.batchStarts(next.responses);
  if (next.lead) job_.elastic_->markAdmissionLocked(job_, &next.responses);
  return next;
}

void Job::Execution::driveUntilRunnable() {
  if (!job_.cross_) return;
  // The last bytes of the collective just run may still be queued here for
  // a neighbour (transport::Transport::idle). wake() writes wake_fd_ after
  // each change that may make a batch runnable.
  for (;;) {
    {
      MutexLock lock(job_.mutex_);
      if (job_.stopping_ || job_.queue_.runnable()) return;
    }
    const bool driven = job_.cross_->endpoints().idle({wake_fd_.get()}, Clock::now() + std::chrono::milliseconds(100));
    uint64_t drained;
    while (::read(wake_fd_.get(), &drained, sizeof drained) > 0) {
    }
    if (!driven) {  // no data plane yet: the condition alone
      MutexLock lock(job_.mutex_);
      ready_cv_.wait_for(lock, std::chrono::milliseconds(100),
                         [&]() GS_REQUIRES(job_.mutex_) { return job_.stopping_ || job_.queue_.runnable(); });
    }
  }
}

void Job::Execution::beginBatchLocked(Job& job, uint64_t fusion_threshold_bytes) {
  job.tuning_.followLeader(fusion_threshold_bytes);  // (0: none came with the batch)
  batch_.fusion_threshold_bytes =
      fusion_threshold_bytes != 0 ? fusion_threshold_bytes : job.tuning_.current().fusion_threshold_bytes;
  batch_.sessions = job.ranks_.byRank();
  batch_.epoch = job.epochs_.current();
  if (job.cross_) batch_.local_ranks = job.ranks_.registered();  // one node: every rank is local
}

void Job::Execution::runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) {
  runner_->run(batch_, std::move(batch), sequence);
  batch_.sessions.clear();
}

void Job::Execution::batchFinished() {
  MutexLock lock(job_.mutex_);
  job_.queue_.finished();
}

// --- The steady-state rounds.

void Job::Execution::takePartInRounds() {
  peer::CrossNode& cross = *job_.cross_;
  // The membership is fixed (not elastic). Rounds among the daemons need
  // endpoints to every one; rounds through the leader, the streams alone.
  const auto deadline = Clock::now() + job_.limits_.join_timeout + std::chrono::seconds(5);
  if (!cross.waitFormed(deadline)) return;  // the usual loop runs (or fails) the job
  std::unique_ptr<peer::FastRounds> among_daemons;
  SteadyRounds::Part part;
  const char* how = "among";
  if (cross.steadyStateRounds()) {
    auto mesh = cross.endpoints().mesh(collective::TransferId::control(0), deadline, 1, {});
    if (!mesh.isOk() || !*mesh) return;
    among_daemons = std::make_unique<peer::FastRounds>(**mesh);
    part.rounds = among_daemons.get();
    part.message_bytes = peer::FastRounds::messageBytes();
    cross.endpoints().sayGoodbyeAtTheEnd();
  } else if ((part.rounds = cross.leaderRounds()) != nullptr) {
    how = "through the leader among";
  } else {
    return;
  }
  part.members = cross.members();
  part.leader = cross.isLeader();
  part.wake_fd = wake_fd_.get();
  GS_LOG(executor, info, "job '{}': cached collectives run after rounds {} the {} daemons", job_.spec_.job_id, how,
         part.members.size());
  job_.rounds_->run(*this, std::move(part));
}

SteadyRounds::Host::Look Job::Execution::beforeRound(bool leader, Clock::duration hold_limit) {
  Look look;
  RankMessages to_ranks;
  std::vector<coordinator::Response> errors;  // follower: requests the leader failed (no ring)
  {
    MutexLock lock(job_.mutex_);
    if (job_.stopping_ || !job_.failure_.empty()) {
      look.ended = true;
      return look;
    }
    for (auto& held : job_.rounds_->takeOverdue(hold_limit)) {
      std::vector<coordinator::Response> unused;
      job_.submission_->submitLocked(job_, held.session, std::move(held.request), &to_ranks, &unused, /*steady=*/false);
    }
    errors = job_.queue_.takeErrors();
    if (!errors.empty()) beginBatchLocked(job_);
    look.led_waiting = leader && !job_.queue_.ready().empty();
  }
  flush(&to_ranks);
  if (!errors.empty()) {
    runBatch(std::move(errors), 0);
    batchFinished();
  }
  return look;
}

SteadyRounds::Host::Led Job::Execution::takeLed(bool leader) {
  Led led;
  {
    MutexLock lock(job_.mutex_);
    if (leader) {
      led.batch = std::move(job_.queue_.nextLed().responses);
      if (!led.batch.empty()) beginBatchLocked(job_);
      led.part.sequence = job_.queue_.lastSequence();
    }
    led.part.fusion_threshold_bytes = job_.tuning_.current().fusion_threshold_bytes;
  }
  if (!led.batch.empty()) lead(led.batch, led.part.sequence);
  return led;
}

bool Job::Execution::runAgreed(const std::vector<uint64_t>& ids, uint64_t fusion_threshold_bytes, uint64_t sequence) {
  if (ids.empty()) return true;
  std::vector<coordinator::Response> agreed;
  {
    MutexLock lock(job_.mutex_);
    if (!job_.failure_.empty()) {
      // The round completed, but the job failed meanwhile: this daemon's
      // held requests were failed, and the other daemons run them.
      lock.unlock();
      leaveAgreedCollectives();
      return false;
    }
    agreed = job_.rounds_->takeRunnable(ids);
    if (agreed.empty()) return true;
    job_.queue_.begin(agreed.size());
    beginBatchLocked(job_, fusion_threshold_bytes);
  }
  runBatch(std::move(agreed), sequence);
  batchFinished();
  return true;
}

void Job::Execution::roundsBroke(const Status& status) { (void)job_.across_->ringFailed(status); }

void Job::Execution::roundsEnded(std::vector<SteadyRounds::Held> left) {
  // The usual loop fails what comes after.
  RankMessages to_ranks;
  {
    MutexLock lock(job_.mutex_);
    const std::string cause = job_.failure_.empty() ? job_.stop_reason_ : job_.failure_;
    for (auto& held : left) {
      job_.failRequestLocked(held.request, aborted("job '" + job_.spec_.job_id + "': " + cause), &to_ranks);
    }
  }
  flush(&to_ranks);
}

void Job::Execution::leaveAgreedCollectives() {
  std::string failure;
  {
    MutexLock lock(job_.mutex_);
    failure = job_.failure_;
  }
  if (!failure.empty()) job_.failJob(failure, /*node_lost=*/true);
}

bool Job::Execution::endedByTheJobsFailure(const Status& status) {
  if (status.code() != StatusCode::kAborted) return false;
  MutexLock lock(job_.mutex_);
  return !job_.failure_.empty() || job_.stopping_;
}

bool Job::Execution::runLeaderBatchesUpTo(uint64_t sequence) {
  for (;;) {
    std::vector<coordinator::Response> batch;
    uint64_t next = 0;
    {
      MutexLock lock(job_.mutex_);
      const auto due = [&]() GS_REQUIRES(job_.mutex_) {
        return job_.stopping_ || !job_.failure_.empty() || job_.queue_.reached(sequence);
      };
      // The leader sent it before the round began: it is on its way.
      if (!ready_cv_.wait_for(lock, job_.limits_.transfer_timeout, due)) {
        lock.unlock();
        job_.failJob("batch " + std::to_string(sequence) + " of the leader never arrived", /*node_lost=*/true);
        return false;
      }
      if (job_.stopping_ || !job_.failure_.empty()) return false;
      std::optional<BatchQueue::Batch> due_now = job_.queue_.takeRemoteUpTo(sequence);
      if (!due_now) return true;
      next = due_now->sequence;
      beginBatchLocked(job_, due_now->fusion_threshold_bytes);
      job_.awaiting_.batchStarts(due_now->responses);
      batch = std::move(due_now->responses);
    }
    runBatch(std::move(batch), next);
    batchFinished();
  }
}

// --- Results.

void Job::Execution::fusedCompleted(const fusion::FusedResponse& fused,
                                    const std::vector<executor::ResponseResult>& results, Clock::time_point started) {
  RankMessages to_ranks;
  {
    MutexLock lock(job_.mutex_);
    const bool decides = job_.decidesTuningLocked();
    const auto done = Clock::now();  // one time for the fused batch
    for (size_t i = 0; i < fused.responses.size(); ++i) {
      completeLocked(fused.responses[i], results[i], started, &to_ranks);
      if (decides && results[i].status.isOk()) {
        tellTuningLocked(job_.tuning_.completed(fused.responses[i].name, fused.responses[i].first().length, done),
                         &to_ranks);
      }
    }
    job_.stats_.fused(fused.bytes);
    job_.queue_.completed(fused.responses.size());
  }
  flush(&to_ranks);
}

void Job::Execution::tellTuningLocked(const std::vector<autotune::TuningEvent>& events, RankMessages* to_ranks) {
  for (const auto& event : events) {
    const v1::DaemonMessage message = tuningSample(event);
    for (const auto& [rank, session] : job_.ranks_.byRank()) {
      if (session->identity().autotune_log) to_ranks->emplace_back(session, message);
    }
  }
}

void Job::Execution::completeLocked(const coordinator::Response& response, const executor::ResponseResult& result,
                                    Clock::time_point started, RankMessages* to_ranks) {
  const auto now = Clock::now();
  const bool admit = job_.elastic_->admitsJoinersLocked(job_, response, result, batch_.epoch);
  if (result.status.isOk()) {
    job_.stats_.collectiveDone();
    if (job_.spec_.elastic && Elastic::isCommitBarrier(response)) job_.epochs_.countCommit();
  } else {
    job_.stats_.failed(result.status.code(), result.status.message());
  }
  job_.awaiting_.completed(response);  // one lock for the response, not one per rank
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
    const bool retriable = batch_.epoch != job_.epochs_.current() || job_.epochs_.ending();
    v1::DaemonMessage message = responseDone(job_.spec_.job_id, response, result, i, retriable, admit);
    if (result.status.isOk()) {
      const DataType dtype = isDataless(response.type) ? v1::DATA_TYPE_UNSPECIFIED : request->dtype;
      job_.stats_.done(response.type, dtype, request->length, request->received, started, now);
    }
    to_ranks->emplace_back(it->second, std::move(message));
  }
  if (result.status.isOk()) job_.epochs_.succeeded(batch_.epoch, now);
  if (admit) job_.place().commitAdmittedLocked(job_, response.name, to_ranks);
}

}  // namespace gradsync::server
