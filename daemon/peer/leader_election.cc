// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_election.h"

#include <algorithm>

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

void LeaderElection::stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

std::vector<v1::NodeInfo> LeaderElection::candidatesAfterLoss(uint64_t* epoch, size_t* daemons) {
  std::vector<v1::NodeInfo> members;
  *epoch = host_->membership(&members);
  *daemons = members.size();
  {
    MutexLock lock(mutex_);
    ballot_.leaderLost(*epoch);
  }
  changed_.notify_all();  // a candidate waiting to notice the loss itself
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
        const auto answer = vote(options_.self_address, epoch, [] { return true; });
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

StatusOr<v1::ElectResponse> LeaderElection::acceptVote(const v1::ElectRequest& request,
                                                       const std::function<bool()>& waiting) {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  if (!host_->isMember(request.voter_address())) {
    return permissionDenied("job '" + options_.job_id + "': " + request.voter_address() +
                            " is not a node of the job: its vote is refused");
  }
  return vote(request.voter_address(), request.epoch(), waiting);
}

StatusOr<v1::ElectResponse> LeaderElection::answerLocked(MutexLock& lock, const std::string& voter, uint64_t epoch,
                                                         size_t majority, CrossClock::time_point deadline,
                                                         const std::function<bool()>& waiting) {
  // The vote counts while its voter waits for the answer.
  while (ballot_.decided(epoch) == nullptr && !stopping_ && CrossClock::now() < deadline && waiting()) {
    changed_.wait_until(lock, std::min(deadline, CrossClock::now() + std::chrono::milliseconds(100)));
  }
  if (ballot_.decided(epoch) == nullptr) {
    ballot_.withdraw(voter, epoch);
    return deadlineExceeded(options_.self_address + " gathered " + std::to_string(ballot_.votes()) + " votes, " +
                            std::to_string(majority) + " needed (a strict majority of the job's daemons)");
  }
  v1::ElectResponse response;
  *response.mutable_change() = *ballot_.decided(epoch);
  // Published when the change was announced: the voter reads the rest.
  v1::NewEpoch& change = *response.mutable_change();
  change.set_node_count(keepFirstPart(change.mutable_nodes(), options_.membership_part_bytes));
  return response;
}

StatusOr<v1::ElectResponse> LeaderElection::vote(const std::string& voter, uint64_t epoch,
                                                 const std::function<bool()>& waiting) {
  const std::string& self = options_.self_address;
  if (!options_.failover) return failedPrecondition(self + " does not fail over leaders (--leader-failover off)");
  std::vector<v1::NodeInfo> members;
  const uint64_t current = host_->membership(&members);
  const size_t majority = members.size() / 2 + 1;
  const bool leads = host_->leads();
  MutexLock lock(mutex_);
  const auto deadline = CrossClock::now() + options_.limits.election;
  // Taking over from this epoch already (its epoch moved on meanwhile).
  if (ballot_.takingOverFrom(epoch)) return answerLocked(lock, voter, epoch, majority, deadline, waiting);
  if (epoch != current) {
    return failedPrecondition(self + " is at epoch " + std::to_string(current) + ", the vote is for epoch " +
                              std::to_string(epoch));
  }
  if (!changed_.wait_for(lock, options_.limits.candidate_notice,
                         [&]() GS_REQUIRES(mutex_) { return ballot_.lostLeaderIn(epoch) || stopping_; })) {
    return failedPrecondition(self + " still hears the leader");
  }
  if (stopping_) return cancelled("job stopped");
  ASSIGN_OR_RETURN(const bool majority_reached, ballot_.receive(voter, epoch, majority));
  GS_LOG(control, info, "job '{}': vote of {} for {} to lead ({} of the {} needed)", options_.job_id, voter, self,
         ballot_.votes(), majority);
  // Ballot::receive says so once: later votes wait for its answer.
  if (majority_reached && !leads) {
    ballot_.takingOver(epoch);
    lock.unlock();
    auto change = host_->takeOver(epoch);
    lock.lock();
    if (!change.isOk()) return change.status();
    ballot_.tookOver(std::move(change).value());
    changed_.notify_all();
  }
  return answerLocked(lock, voter, epoch, majority, deadline, waiting);
}

}  // namespace gradsync::peer
