// SPDX-License-Identifier: Apache-2.0
// Job, the cached steady state across daemons (daemon/peer/fast_rounds.h,
// steady_state.h): local requests that repeat a cached collective are held
// here instead of going to the leader; the executor thread takes part in
// lock-step rounds with the other daemons and runs, after the leader's
// batches the round names, the cached collectives every daemon's ranks are
// ready for.
#include <unistd.h>

#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/peer/fast_rounds.h"
#include "daemon/peer/hold_limit.h"
#include "daemon/server/job.h"

namespace gradsync::server {
namespace {
// The rounds' batches tag their rings apart from the leader's batches.
constexpr uint64_t kRoundSequenceBase = uint64_t{1} << 40;

// The collectives the rounds run: those the response cache keeps that move
// data (not barriers, joins or process-set changes).
bool runsInRounds(CollectiveType type) {
  switch (type) {
    case v1::ALLREDUCE:
    case v1::ALLGATHER:
    case v1::BROADCAST:
    case v1::REDUCESCATTER:
    case v1::ALLTOALL:
      return true;
    default:
      return false;
  }
}
}  // namespace

void Job::wakeExecutorLocked() {
  ready_cv_.notify_one();
  if (wake_fd_.get() >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
  }
}

void Job::learnSteadyLocked(uint64_t id) {
  auto response = cross_->cachedResponse(id);
  bool eligible = response && runsInRounds(response->type) && response->status.isOk();
  std::set<int> ranks, local;
  for (size_t i = 0; eligible && i < response->ranks.size(); ++i) {
    eligible = response->requests[i].has_value();  // a joined rank: through the leader
    ranks.insert(response->ranks[i]);
    if (ranks_.registeredHere(response->ranks[i])) local.insert(response->ranks[i]);
  }
  // Every node must hold a rank of it: a node without one would never say
  // it is ready.
  for (const auto& node : steady_members_) {
    eligible = eligible && std::any_of(node.ranks().begin(), node.ranks().end(), [&](int r) { return ranks.count(r); });
  }
  steady_.learn(id, eligible ? *response : coordinator::Response(), eligible ? local : std::set<int>());
}

bool Job::holdSteadyLocked(const std::shared_ptr<Session>& session, coordinator::Request& request) {
  // A grouped allreduce runs whole or not at all (SteadyState holds its
  // members until all are ready, and releases them together).
  if (!steady_rounds_ || !session || !runsInRounds(request.type)) return false;
  const uint64_t id = cross_->cachedId(request);
  if (id == 0 || id > peer::RoundExchange::kMaxIds) return false;
  if (!steady_.knows(id)) learnSteadyLocked(id);
  // A second request of one name: the leader's negotiator names the error.
  if (!steady_.canHold(id, request.rank) || steady_.holds(request.rank, request.name)) return false;
  if (steady_.hold(id, {session, std::move(request), Clock::now()})) {
    steady_dirty_ = true;
    wakeExecutorLocked();
  }
  return true;
}

void Job::steadyExecutorLoop() {
  // The membership is fixed (not elastic). Rounds among the daemons need
  // endpoints to every one; rounds through the leader, the streams alone.
  const auto deadline = Clock::now() + limits_.join_timeout + std::chrono::seconds(5);
  if (!cross_->waitFormed(deadline)) return;  // the usual loop runs (or fails) the job
  std::unique_ptr<peer::FastRounds> among_daemons;
  peer::RoundExchange* rounds = nullptr;
  const char* how = "among";
  if (cross_->steadyStateRounds()) {
    auto mesh = cross_->mesh(collective::TransferId::control(0), deadline, 1, {});
    if (!mesh.isOk() || !*mesh) return;
    among_daemons = std::make_unique<peer::FastRounds>(**mesh);
    rounds = among_daemons.get();
    cross_->sayGoodbyeAtTheEnd();
  } else if ((rounds = cross_->leaderRounds()) != nullptr) {
    how = "through the leader among";
  } else {
    return;
  }
  size_t daemons;
  takePartInRounds(rounds);
  {
    MutexLock lock(mutex_);
    steady_members_ = cross_->members();
    steady_rounds_ = true;
    daemons = steady_members_.size();
  }
  steady_round_message_bytes_ = among_daemons ? peer::FastRounds::messageBytes() : 0;
  const bool leader = cross_->isLeader();
  GS_LOG(executor, info, "job '{}': cached collectives run after rounds {} the {} daemons", spec_.job_id, how, daemons);
  bool peers_started = false;
  for (;;) {
    const SteadyPass pass = prepareSteadyPass(leader);
    if (pass.stop) break;
    if (!pass.wanted && !peers_started) {
      auto started = rounds->waitForPeers(wake_fd_.get(), pass.wake_by);
      uint64_t drained;
      while (::read(wake_fd_.get(), &drained, sizeof drained) > 0) {
      }
      if (!started.isOk()) {
        if (!endedByTheJobsFailure(started.status())) (void)ringFailed(started.status());
        break;
      }
      peers_started = *started;
      continue;  // look again: what woke it may be local
    }
    peers_started = false;
    if (!steadyRound(*rounds, leader)) break;
  }
  takePartInRounds(nullptr);
  MutexLock lock(mutex_);
  steady_rounds_ = false;  // the usual loop fails what is left
  RankMessages to_ranks;
  for (auto& held : steady_.takeAll()) {
    failRequestLocked(held.request,
                      aborted("job '" + spec_.job_id + "': " + (failure_.empty() ? stop_reason_ : failure_)),
                      &to_ranks);
  }
  flush(&to_ranks);
}

Job::SteadyPass Job::prepareSteadyPass(bool leader) {
  SteadyPass pass;
  pass.wake_by = Clock::now() + std::chrono::seconds(1);
  RankMessages to_ranks;
  std::vector<coordinator::Response> errors;  // follower: requests the leader failed (no ring)
  {
    MutexLock lock(mutex_);
    if (stopping_ || !failure_.empty()) {
      pass.stop = true;
      return pass;
    }
    const Clock::duration hold_limit = steady_hold_.limit();
    for (auto& held : steady_.takeOlderThan(Clock::now() - hold_limit)) {
      std::vector<coordinator::Response> unused;
      submitToCoordinator(held.session, std::move(held.request), &to_ranks, &unused, /*steady=*/false);
    }
    errors = queue_.takeErrors();
    if (!errors.empty()) beginBatchLocked();
    pass.wanted = steady_dirty_ || (leader && !queue_.ready().empty());
    if (auto oldest = steady_.oldest()) pass.wake_by = std::min(pass.wake_by, *oldest + hold_limit);
  }
  flush(&to_ranks);
  if (!errors.empty()) {
    runBatch(std::move(errors));
    MutexLock lock(mutex_);
    queue_.finished();
  }
  return pass;
}

Job::RoundPart Job::takeRoundPart(bool leader) {
  RoundPart part;
  {
    MutexLock lock(mutex_);
    steady_dirty_ = false;
    part.ready = steady_.ready();
    if (leader) {
      part.batch = std::move(queue_.nextLed().responses);
      if (!part.batch.empty()) beginBatchLocked();
      part.leader.sequence = queue_.lastSequence();
    }
    part.leader.fusion_threshold_bytes = tuning_.current().fusion_threshold_bytes;
  }
  if (!part.batch.empty()) {
    Status sent = cross_->broadcast(part.batch, part.leader.sequence, batch_.epoch, batch_.fusion_threshold_bytes);
    if (!sent.isOk()) {
      for (auto& r : part.batch) r.status = sent;
      failJob(sent.message(), /*node_lost=*/true);
    }
  }
  return part;
}

void Job::steadyRoundFailed(const Status& failure, RoundPart part) {
  // The followers run a batch the leader broadcast (in their usual loop,
  // when the rounds end): so does the leader. (A broken data plane fails
  // it.)
  if (!part.batch.empty()) runBatch(std::move(part.batch), part.leader.sequence);
  if (!endedByTheJobsFailure(failure)) {
    (void)ringFailed(failure);
  } else if (!part.ready.empty()) {
    // The job's failure cut this round short after this daemon said
    // which collectives its ranks are ready for: a peer may have
    // completed the round and now runs them.
    leaveAgreedCollectives();
  }
}

bool Job::runAgreedCollectives(const std::vector<uint64_t>& ids, uint64_t fusion_threshold_bytes, uint64_t sequence) {
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
    for (uint64_t id : steady_.runnable(ids)) agreed.push_back(steady_.take(id));
    if (agreed.empty()) return true;
    steady_round_collectives_.fetch_add(agreed.size(), std::memory_order_relaxed);
    queue_.begin(agreed.size());
    beginBatchLocked(fusion_threshold_bytes);
  }
  runBatch(std::move(agreed), sequence);
  MutexLock lock(mutex_);
  queue_.finished();
  return true;
}

bool Job::steadyRound(peer::RoundExchange& rounds, bool leader) {
  RoundPart part = takeRoundPart(leader);
  const uint64_t sent_before = rounds.messagesSent();
  const auto began = Clock::now();
  auto outcome = rounds.exchange(part.ready, part.leader, began + limits_.transfer_timeout);
  steady_hold_.roundTook(Clock::now() - began);
  steady_rounds_done_.fetch_add(1, std::memory_order_relaxed);
  steady_round_messages_.fetch_add(rounds.messagesSent() - sent_before, std::memory_order_relaxed);
  if (!outcome.isOk()) {
    steadyRoundFailed(outcome.status(), std::move(part));
    return false;
  }
  // 1. The leader's batches up to the round's sequence.
  if (leader) {
    if (!part.batch.empty()) runBatch(std::move(part.batch), part.leader.sequence);
    MutexLock lock(mutex_);
    queue_.finished();
  } else if (!runLeaderBatchesUpTo(outcome->leader_sequence)) {
    if (!outcome->ids.empty()) leaveAgreedCollectives();
    return false;
  }
  // 2. The cached collectives every daemon is ready for (whole groups).
  return runAgreedCollectives(outcome->ids, outcome->fusion_threshold_bytes, kRoundSequenceBase + rounds.round());
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
      startForwardedLocked(due_now->responses);
      batch = std::move(due_now->responses);
    }
    runBatch(std::move(batch), next);
    MutexLock lock(mutex_);
    queue_.finished();
  }
}

}  // namespace gradsync::server
