// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_election.h"

#include <algorithm>
#include <future>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/membership_parts.h"
#include "daemon/peer/reachability.h"

namespace gradsync::peer {

LeaderElection::LeaderElection(Options options, Host* host)
    : options_(std::move(options)), host_(host), ballot_(options_.self_address) {}

bool LeaderElection::electing(uint64_t epoch) const {
  if (!options_.failover) return false;
  MutexLock lock(mutex_);
  return ballot_.lostLeaderIn(epoch);
}

LeaderElection::~LeaderElection() { stop(); }

void LeaderElection::stop() {
  std::thread thread;
  Answers cancelled_votes;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    cancelled_votes = dueLocked(CrossClock::now());
    thread.swap(thread_);
  }
  changed_.notify_all();
  deliver(std::move(cancelled_votes));
  if (thread.joinable() && thread.get_id() != std::this_thread::get_id()) thread.join();
  if (thread.joinable()) thread.detach();  // stopped from its own takeover: it returns next
}

std::vector<v1::NodeInfo> LeaderElection::candidatesAfterLoss(uint64_t* epoch, size_t* daemons) {
  std::vector<v1::NodeInfo> members;
  *epoch = host_->membership(&members);
  *daemons = members.size();
  Answers refused;
  {
    MutexLock lock(mutex_);
    ballot_.leaderLost(*epoch);
    // The votes that waited for this daemon to notice the loss itself.
    for (auto it = held_.begin(); it != held_.end();) {
      HeldVote& held = it->second;
      Status counted = held.counted || held.epoch != *epoch ? okStatus() : countLocked(held);
      if (counted.isOk()) {
        ++it;
        continue;
      }
      refused.emplace_back(std::move(held.answer), std::move(counted));
      it = held_.erase(it);
    }
  }
  changed_.notify_all();
  deliver(std::move(refused));
  std::vector<v1::NodeInfo> candidates;
  for (auto& node : members) {
    if (node.cross_rank() != 0) candidates.push_back(std::move(node));
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const v1::NodeInfo& a, const v1::NodeInfo& b) { return a.cross_rank() < b.cross_rank(); });
  return candidates;
}

StatusOr<v1::ElectResponse> LeaderElection::voteFor(const v1::NodeInfo& candidate,
                                                    const std::shared_ptr<grpc::Channel>& channel, uint64_t epoch) {
  {
    MutexLock lock(mutex_);
    RETURN_IF_ERROR(ballot_.cast(candidate.peer_address(), epoch));  // this daemon stands itself: its turn comes
  }
  auto answer = askVote(channel, epoch);
  if (!answer.isOk()) {
    MutexLock lock(mutex_);
    ballot_.uncast(epoch);  // refused, or withdrawn when the call ended: the next candidate
  }
  return answer;
}

StatusOr<bool> LeaderElection::run(const std::string& cause) {
  uint64_t epoch;
  size_t daemons;
  const std::vector<v1::NodeInfo> candidates = candidatesAfterLoss(&epoch, &daemons);
  if (daemons < 3) {
    return failedPrecondition(cause + " (no failover: a majority needs three or more daemons, the job has " +
                              std::to_string(daemons) + ")");
  }
  GS_LOG(control, warn, "job '{}': {}; electing a new leader among {} daemons", options_.job_id, cause, daemons - 1);
  const auto voting_deadline = CrossClock::now() + options_.limits.voting;
  std::string tried;
  const auto note = [&](const v1::NodeInfo& candidate, const std::string& why) {
    tried += (tried.empty() ? "" : "; ") + membership::describeNode(candidate) + ": " + why;
  };
  const auto lost_majority = [&](const std::string& why) {
    return failedPrecondition(cause + "; this daemon lost the majority: no new leader won " +
                              std::to_string(daemons / 2 + 1) + " of the job's " + std::to_string(daemons) +
                              " daemons' votes (" + tried + why + ")");
  };
  const auto credentials = options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials();
  for (size_t first = 0; first < candidates.size(); first += options_.limits.probe_window) {
    const size_t end = std::min(candidates.size(), first + options_.limits.probe_window);
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (size_t i = first; i < end; ++i)
      channels.push_back(grpc::CreateChannel(candidates[i].peer_address(), credentials));
    const std::vector<bool> reachable =
        probeReachable(channels, std::chrono::system_clock::now() + options_.limits.probe);
    for (size_t i = first; i < end; ++i) {
      const v1::NodeInfo& candidate = candidates[i];
      if (candidate.peer_address() == options_.self_address) {
        const auto answer = voteForSelf(epoch);
        if (answer.isOk()) return true;  // this daemon leads
        note(candidate, answer.status().message());
        return lost_majority("");
      }
      if (CrossClock::now() > voting_deadline) return lost_majority("; out of time");
      if (!reachable[i - first]) {
        note(candidate, "unreachable");
        continue;
      }
      auto answer = voteFor(candidate, channels[i - first], epoch);
      if (answer.isOk()) {
        RETURN_IF_ERROR(host_->followElected(candidate, channels[i - first], std::move(answer).value()));
        return false;
      }
      note(candidate, answer.status().message());
    }
  }
  return lost_majority("");
}

StatusOr<v1::ElectResponse> LeaderElection::askVote(const std::shared_ptr<grpc::Channel>& channel,
                                                    uint64_t epoch) const {
  v1::ElectRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_epoch(epoch);
  request.set_voter_address(options_.self_address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options_.limits.election + std::chrono::seconds(1));
  v1::ElectResponse response;
  const grpc::Status status = v1::Peer::NewStub(channel)->Elect(&context, request, &response);
  if (!status.ok()) return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
  return response;
}

uint64_t LeaderElection::acceptVote(const v1::ElectRequest& request, Answer answer) {
  if (!constantTimeEqual(request.token(), options_.token)) {
    answer(unauthenticated("job '" + options_.job_id + "': token does not match"));
    return 0;
  }
  if (!host_->isMember(request.voter_address())) {
    answer(permissionDenied("job '" + options_.job_id + "': " + request.voter_address() +
                            " is not a node of the job: its vote is refused"));
    return 0;
  }
  return vote(request.voter_address(), request.epoch(), std::move(answer));
}

uint64_t LeaderElection::vote(const std::string& voter, uint64_t epoch, Answer answer) {
  const std::string& self = options_.self_address;
  if (!options_.failover) {
    answer(failedPrecondition(self + " does not fail over leaders (--leader-failover off)"));
    return 0;
  }
  size_t members = 0;
  const uint64_t current = host_->memberCount(&members);
  MutexLock lock(mutex_);
  if (stopping_) {
    lock.unlock();
    answer(cancelled("job stopped"));
    return 0;
  }
  HeldVote held{
      voter, epoch, members / 2 + 1, false, CrossClock::now() + options_.limits.candidate_notice, std::move(answer)};
  if (ballot_.takingOverFrom(epoch)) {
    // Taking over from this epoch already (its epoch moved on meanwhile):
    // the same answer as the votes that made the majority.
    held.counted = true;
    held.deadline = CrossClock::now() + options_.limits.election;
  } else if (epoch != current) {
    lock.unlock();
    held.answer(failedPrecondition(self + " is at epoch " + std::to_string(current) + ", the vote is for epoch " +
                                   std::to_string(epoch)));
    return 0;
  } else if (ballot_.lostLeaderIn(epoch)) {
    if (Status counted = countLocked(held); !counted.isOk()) {
      lock.unlock();
      held.answer(std::move(counted));
      return 0;
    }
  }
  const uint64_t id = next_vote_++;
  held_.emplace(id, std::move(held));
  startThreadLocked();
  changed_.notify_all();
  return id;
}

Status LeaderElection::countLocked(HeldVote& held) {
  ASSIGN_OR_RETURN(const bool majority_reached, ballot_.receive(held.voter, held.epoch, held.majority));
  held.counted = true;
  held.deadline = CrossClock::now() + options_.limits.election;
  // Each vote at debug (a thousand in a large job's election); the first
  // other daemon's and the one that makes the majority at info.
  const std::string counted = fmt::format("job '{}': vote of {} for {} to lead ({} of the {} needed)", options_.job_id,
                                          held.voter, options_.self_address, ballot_.votes(), held.majority);
  if ((ballot_.votes() == 2 && held.voter != options_.self_address) || majority_reached) {
    GS_LOG(control, info, "{}", counted);
  } else {
    GS_LOG(control, debug, "{}", counted);
  }
  // Ballot::receive says so once: later votes wait for the takeover.
  if (majority_reached) {
    ballot_.takingOver(held.epoch);
    takeover_due_ = held.epoch;
    changed_.notify_all();
  }
  return okStatus();
}

void LeaderElection::voterGone(uint64_t id) {
  Answer answer;
  {
    MutexLock lock(mutex_);
    auto it = held_.find(id);
    if (it == held_.end()) return;  // answered already
    ballot_.withdraw(it->second.voter, it->second.epoch);
    answer = std::move(it->second.answer);
    held_.erase(it);
  }
  answer(cancelled("the voter's call ended"));
}

size_t LeaderElection::votesHeld() const {
  MutexLock lock(mutex_);
  return held_.size();
}

void LeaderElection::tookOverLocked(v1::NewEpoch change) {
  // The voters' answer, once: the change with its membership's first part
  // (published when the change was announced: the voter reads the rest).
  v1::ElectResponse answer;
  *answer.mutable_change() = change;
  v1::NewEpoch& first_part = *answer.mutable_change();
  first_part.set_node_count(keepFirstPart(first_part.mutable_nodes(), options_.membership_part_bytes));
  answer_ = std::move(answer);
  ballot_.tookOver(std::move(change));
}

LeaderElection::Answers LeaderElection::dueLocked(CrossClock::time_point now) {
  Answers due;
  for (auto it = held_.begin(); it != held_.end();) {
    HeldVote& held = it->second;
    const auto failed = takeover_failed_.find(held.epoch);
    std::optional<StatusOr<v1::ElectResponse>> answer;
    if (stopping_) {
      answer = cancelled("job stopped");
    } else if (held.counted && ballot_.decided(held.epoch) != nullptr) {
      answer = *answer_;  // the ballot decided: built by tookOverLocked
    } else if (held.counted && failed != takeover_failed_.end()) {
      answer = failed->second;
    } else if (now >= held.deadline && !held.counted) {
      answer = failedPrecondition(options_.self_address + " still hears the leader");
    } else if (now >= held.deadline) {
      ballot_.withdraw(held.voter, held.epoch);
      answer = deadlineExceeded(options_.self_address + " gathered " + std::to_string(ballot_.votes()) + " votes, " +
                                std::to_string(held.majority) + " needed (a strict majority of the job's daemons)");
    }
    if (!answer) {
      ++it;
      continue;
    }
    due.emplace_back(std::move(held.answer), std::move(*answer));
    it = held_.erase(it);
  }
  return due;
}

void LeaderElection::deliver(Answers answers) {
  for (auto& [answer, response] : answers) answer(std::move(response));
}

void LeaderElection::startThreadLocked() {
  if (!thread_.joinable()) thread_ = std::thread([this] { keepTime(); });
}

StatusOr<v1::NewEpoch> LeaderElection::takeOver(uint64_t epoch) {
  if (host_->leads()) return failedPrecondition(options_.self_address + " leads already");
  return host_->takeOver(epoch);
}

void LeaderElection::keepTime() {
  MutexLock lock(mutex_);
  for (;;) {
    if (takeover_due_ && !stopping_) {
      const uint64_t epoch = *takeover_due_;
      takeover_due_.reset();
      lock.unlock();
      auto change = takeOver(epoch);  // the votes are answered only once it is decided
      lock.lock();
      if (change.isOk()) {
        tookOverLocked(std::move(change).value());
      } else {
        takeover_failed_[epoch] = change.status();
      }
    }
    Answers due = dueLocked(CrossClock::now());
    if (!due.empty()) {
      lock.unlock();
      deliver(std::move(due));
      lock.lock();
      continue;
    }
    if (stopping_) return;
    if (takeover_due_) continue;
    std::optional<CrossClock::time_point> next;
    for (const auto& [id, held] : held_) next = next ? std::min(*next, held.deadline) : held.deadline;
    if (next) {
      changed_.wait_until(lock, *next);
    } else {
      changed_.wait(lock);
    }
  }
}

StatusOr<v1::ElectResponse> LeaderElection::voteForSelf(uint64_t epoch) {
  auto promise = std::make_shared<std::promise<StatusOr<v1::ElectResponse>>>();
  auto future = promise->get_future();
  vote(options_.self_address, epoch,
       [promise](StatusOr<v1::ElectResponse> answer) { promise->set_value(std::move(answer)); });
  // Answered by the election's deadline (its thread keeps it), or by stop;
  // bounded here too, should the takeover itself never return.
  if (future.wait_for(options_.limits.voting) != std::future_status::ready) {
    return deadlineExceeded(options_.self_address + ": its own vote was not answered within the voting limit");
  }
  return future.get();
}

}  // namespace gradsync::peer
