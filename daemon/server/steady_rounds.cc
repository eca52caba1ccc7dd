// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/steady_rounds.h"

#include <unistd.h>

#include <algorithm>
#include <set>

namespace gradsync::server {

SteadyRounds::SteadyRounds(std::string job_id, Clock::duration transfer_timeout, Cache cache)
    : job_id_(std::move(job_id)), transfer_timeout_(transfer_timeout), cache_(std::move(cache)) {}

bool SteadyRounds::runsInRounds(CollectiveType type) {
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

void SteadyRounds::learnLocked(uint64_t id, const std::function<bool(int)>& is_local) {
  auto response = cache_.response(id);
  bool eligible = response && runsInRounds(response->type) && response->status.isOk();
  std::set<int> ranks, local;
  for (size_t i = 0; eligible && i < response->ranks.size(); ++i) {
    eligible = response->requests[i].has_value();  // a joined rank: through the leader
    ranks.insert(response->ranks[i]);
    if (is_local(response->ranks[i])) local.insert(response->ranks[i]);
  }
  // Every node must hold a rank of it: a node without one would never say
  // it is ready.
  for (const auto& node : members_) {
    eligible = eligible && std::any_of(node.ranks().begin(), node.ranks().end(), [&](int r) { return ranks.count(r); });
  }
  held_.learn(id, eligible ? *response : coordinator::Response(), eligible ? local : std::set<int>());
}

SteadyRounds::Hold SteadyRounds::hold(const std::shared_ptr<Session>& session, coordinator::Request& request,
                                      const std::function<bool(int)>& is_local) {
  if (!runsInRounds(request.type)) return Hold::kNot;
  const uint64_t id = cache_.id(request);
  if (id == 0 || id > peer::RoundExchange::kMaxIds) return Hold::kNot;
  MutexLock lock(mutex_);
  if (!on_) return Hold::kNot;
  if (!held_.knows(id)) learnLocked(id, is_local);
  // A second request of one name: the leader's negotiator names the error.
  if (!held_.canHold(id, request.rank) || held_.holds(request.rank, request.name)) return Hold::kNot;
  if (!held_.hold(id, {session, std::move(request), Clock::now()})) return Hold::kHeld;
  dirty_ = true;
  return Hold::kReady;
}

std::vector<SteadyRounds::Held> SteadyRounds::takeGroup(uint64_t group_id) {
  MutexLock lock(mutex_);
  return held_.takeGroup(group_id);
}

std::vector<SteadyRounds::Held> SteadyRounds::takeOverdue(Clock::duration hold_limit) {
  MutexLock lock(mutex_);
  return held_.takeOlderThan(Clock::now() - hold_limit);
}

std::vector<SteadyRounds::Held> SteadyRounds::takeAll() {
  MutexLock lock(mutex_);
  return held_.takeAll();
}

bool SteadyRounds::dirty() const {
  MutexLock lock(mutex_);
  return dirty_;
}

std::vector<uint64_t> SteadyRounds::takeReady() {
  MutexLock lock(mutex_);
  dirty_ = false;
  return held_.ready();
}

std::vector<coordinator::Response> SteadyRounds::takeRunnable(const std::vector<uint64_t>& ids) {
  std::vector<coordinator::Response> agreed;
  MutexLock lock(mutex_);
  for (uint64_t id : held_.runnable(ids)) agreed.push_back(held_.take(id));
  collectives_.fetch_add(agreed.size(), std::memory_order_relaxed);
  return agreed;
}

SteadyRounds::Clock::time_point SteadyRounds::wakeBy(Clock::duration hold_limit) const {
  Clock::time_point by = Clock::now() + std::chrono::seconds(1);
  MutexLock lock(mutex_);
  if (auto oldest = held_.oldest()) by = std::min(by, *oldest + hold_limit);
  return by;
}

void SteadyRounds::abort(const std::string& reason) {
  MutexLock lock(mutex_);
  if (exchange_ != nullptr) exchange_->abort(reason);
}

void SteadyRounds::run(Host& host, Part part) {
  peer::RoundExchange& rounds = *part.rounds;
  const bool leader = part.leader;
  message_bytes_.store(part.message_bytes);
  {
    MutexLock lock(mutex_);
    exchange_ = &rounds;
    members_ = std::move(part.members);
    on_ = true;
  }
  bool peers_started = false;
  for (;;) {
    const Host::Look look = host.beforeRound(leader, hold_limit_.limit());
    if (look.ended) break;
    if (!look.led_waiting && !dirty() && !peers_started) {
      auto started = rounds.waitForPeers(part.wake_fd, wakeBy(hold_limit_.limit()));
      uint64_t drained;
      while (::read(part.wake_fd, &drained, sizeof drained) > 0) {
      }
      if (!started.isOk()) {
        if (!host.endedByTheJobsFailure(started.status())) host.roundsBroke(started.status());
        break;
      }
      peers_started = *started;
      continue;  // look again: what woke it may be local
    }
    peers_started = false;
    if (!round(host, rounds, leader)) break;
  }
  std::vector<Held> left;
  {
    MutexLock lock(mutex_);
    exchange_ = nullptr;
    on_ = false;  // from now on requests go to the leader
    left = held_.takeAll();
  }
  host.roundsEnded(std::move(left));
}

bool SteadyRounds::round(Host& host, peer::RoundExchange& rounds, bool leader) {
  const std::vector<uint64_t> ready = takeReady();
  Host::Led led = host.takeLed(leader);
  const uint64_t sent_before = rounds.messagesSent();
  const auto began = Clock::now();
  auto outcome = rounds.exchange(ready, led.part, began + transfer_timeout_);
  hold_limit_.roundTook(Clock::now() - began);
  rounds_done_.fetch_add(1, std::memory_order_relaxed);
  messages_.fetch_add(rounds.messagesSent() - sent_before, std::memory_order_relaxed);
  if (!outcome.isOk()) {
    roundFailed(host, outcome.status(), std::move(led), !ready.empty());
    return false;
  }
  // 1. The leader's batches up to the round's sequence.
  if (leader) {
    if (!led.batch.empty()) host.runBatch(std::move(led.batch), led.part.sequence);
    host.batchFinished();
  } else if (!host.runLeaderBatchesUpTo(outcome->leader_sequence)) {
    if (!outcome->ids.empty()) host.leaveAgreedCollectives();
    return false;
  }
  // 2. The cached collectives every daemon is ready for (whole groups).
  return host.runAgreed(outcome->ids, outcome->fusion_threshold_bytes, kRoundSequenceBase + rounds.round());
}

void SteadyRounds::roundFailed(Host& host, const Status& failure, Host::Led led, bool offered) {
  // The followers run a batch the leader broadcast (in their usual loop,
  // when the rounds end): so does the leader. (A broken data plane fails
  // it.)
  if (!led.batch.empty()) host.runBatch(std::move(led.batch), led.part.sequence);
  if (!host.endedByTheJobsFailure(failure)) {
    host.roundsBroke(failure);
  } else if (offered) {
    // The job's failure cut this round short after this daemon said which
    // collectives its ranks are ready for: a peer may have completed the
    // round and now runs them.
    host.leaveAgreedCollectives();
  }
}

void SteadyRounds::describe(v1::JobInfo* info) const {
  info->set_steady_rounds(rounds_done_.load());
  info->set_steady_round_messages(messages_.load());
  info->set_steady_round_collectives(collectives_.load());
  info->set_steady_round_message_bytes(message_bytes_.load());
}

}  // namespace gradsync::server
