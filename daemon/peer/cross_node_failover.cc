// SPDX-License-Identifier: Apache-2.0
// CrossNode, leader failover (elastic jobs, daemons started with
// --leader-failover quorum): when the leader's daemon is lost, the lowest
// surviving daemon leads once a strict majority of the job's daemons (the
// lost leader counted) voted for it, and the job goes on in a new epoch
// without the leader's node and ranks.
//
//  - Each follower that loses its leader stream (broken, or silent for
//    kSilenceLimitMs) votes once per epoch, for the lowest candidate that
//    it reaches (all probed at once) and that lost the leader too, in
//    cross-rank order: itself when it gets that far. A voter records whom
//    it voted for and refuses votes for itself meanwhile; a candidate counts
//    a vote only while the voter waits for its answer, counts its own, and
//    counts votes only once it has lost the leader too (a follower cut off
//    alone cannot depose a live leader). Two majorities cannot form, so two
//    leaders cannot either.
//  - The winner takes over: it becomes cross rank 0, removes the old
//    leader's node (its ranks are lost), applies the new epoch to its own
//    Job, and only then answers the voters, which apply it and open their
//    coordination streams to it.
//  - No majority within kVotingLimit (two daemons, too many lost at once,
//    or this daemon on the minority side of a partition): the job fails on
//    this side, saying it lost the majority. The old leader, on its side,
//    stops once it reaches no majority (CrossNode::LeaderSide::majority).
#include <algorithm>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
#include "daemon/peer/cross_node.h"
#include "daemon/peer/cross_node_sides.h"
#include "daemon/peer/reachability.h"

namespace gradsync::peer {
namespace {

constexpr auto kElectionLimit = std::chrono::seconds(5);  // a candidate's wait for a majority
constexpr auto kCandidateNoticeLimit = std::chrono::seconds(3);
constexpr auto kVotingLimit = std::chrono::milliseconds(CrossNode::kVotingLimitMs);  // a voter's whole election
constexpr auto kProbeLimit = std::chrono::seconds(2);  // to learn which candidates are reachable
constexpr size_t kProbeWindow = 16;                    // candidates probed at once

}  // namespace

bool CrossNode::electing() const {
  MutexLock lock(mutex_);
  return options_.failover && ballot_.lostLeaderIn(book_.epoch());
}

std::vector<v1::NodeInfo> CrossNode::electionCandidatesAfterLoss(uint64_t* epoch, size_t* daemons) {
  std::vector<v1::NodeInfo> candidates;
  {
    MutexLock lock(mutex_);
    *epoch = book_.epoch();
    *daemons = book_.members().size();
    ballot_.leaderLost(*epoch);
    for (const auto& node : book_.members()) {
      if (node.cross_rank() != 0) candidates.push_back(node);
    }
  }
  formed_cv_.notify_all();  // a candidate waiting to notice the loss itself
  std::sort(candidates.begin(), candidates.end(),
            [](const v1::NodeInfo& a, const v1::NodeInfo& b) { return a.cross_rank() < b.cross_rank(); });
  return candidates;
}

StatusOr<v1::ElectResponse> CrossNode::voteFor(const v1::NodeInfo& candidate,
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

Status CrossNode::followElected(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel,
                                v1::ElectResponse answer) {
  v1::NewEpoch& change = *answer.mutable_change();
  if (change.node_count() > 0) {
    RETURN_IF_ERROR(readRestOfMembers(v1::Peer::NewStub(channel).get(), options_.job_id, options_.token, change.epoch(),
                                      change.node_count(), change.mutable_nodes()));
  }
  applyNewEpoch(change);
  link_.connect(leader.peer_address());  // CheckMember asks the new leader too
  openStream();
  leader_changes_.fetch_add(1);
  GS_LOG(control, warn, "job '{}': follows the new leader {} at epoch {}", options_.job_id,
         membership::describeNode(leader), change.epoch());
  return okStatus();
}

StatusOr<bool> CrossNode::failover(const std::string& cause) {
  uint64_t epoch;
  size_t daemons;
  const std::vector<v1::NodeInfo> candidates = electionCandidatesAfterLoss(&epoch, &daemons);
  if (daemons < 3) {
    return failedPrecondition(cause + " (no failover: a majority needs three or more daemons, the job has " +
                              std::to_string(daemons) + ")");
  }
  GS_LOG(control, warn, "job '{}': {}; electing a new leader among {} daemons", options_.job_id, cause, daemons - 1);
  const auto voting_deadline = std::chrono::system_clock::now() + kVotingLimit;
  std::string tried;
  const auto note = [&](const v1::NodeInfo& candidate, const std::string& why) {
    tried += (tried.empty() ? "" : "; ") + membership::describeNode(candidate) + ": " + why;
  };
  const auto lost_majority = [&](const std::string& why) {
    return failedPrecondition(cause + "; this daemon lost the majority: no new leader won " +
                              std::to_string(daemons / 2 + 1) + " of the job's " + std::to_string(daemons) +
                              " daemons' votes (" + tried + why + ")");
  };
  for (size_t first = 0; first < candidates.size(); first += kProbeWindow) {
    const size_t end = std::min(candidates.size(), first + kProbeWindow);
    std::vector<std::shared_ptr<grpc::Channel>> channels;
    for (size_t i = first; i < end; ++i) {
      channels.push_back(grpc::CreateChannel(candidates[i].peer_address(), options_.credentials
                                                                               ? options_.credentials
                                                                               : grpc::InsecureChannelCredentials()));
    }
    const std::vector<bool> reachable = probeReachable(channels, std::chrono::system_clock::now() + kProbeLimit);
    for (size_t i = first; i < end; ++i) {
      const v1::NodeInfo& candidate = candidates[i];
      if (candidate.peer_address() == options_.self_address) {
        const auto answer = vote(options_.self_address, epoch, [] { return true; });
        if (answer.isOk()) return true;  // this daemon leads
        note(candidate, answer.status().message());
        return lost_majority("");
      }
      if (std::chrono::system_clock::now() > voting_deadline) return lost_majority("; out of time");
      if (!reachable[i - first]) {
        note(candidate, "unreachable");
        continue;
      }
      auto answer = voteFor(candidate, channels[i - first], epoch);
      if (answer.isOk()) {
        RETURN_IF_ERROR(followElected(candidate, channels[i - first], std::move(answer).value()));
        return false;
      }
      note(candidate, answer.status().message());
    }
  }
  return lost_majority("");
}

StatusOr<v1::ElectResponse> CrossNode::askVote(const std::shared_ptr<grpc::Channel>& channel, uint64_t epoch) const {
  v1::ElectRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_epoch(epoch);
  request.set_voter_address(options_.self_address);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kElectionLimit + std::chrono::seconds(1));
  v1::ElectResponse response;
  const grpc::Status status = v1::Peer::NewStub(channel)->Elect(&context, request, &response);
  if (!status.ok()) return Status(static_cast<StatusCode>(status.error_code()), status.error_message());
  return response;
}

StatusOr<v1::ElectResponse> CrossNode::acceptVote(const v1::ElectRequest& request,
                                                  const std::function<bool()>& waiting) {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  {
    MutexLock lock(mutex_);
    if (book_.member(request.voter_address()) == nullptr) {
      return permissionDenied("job '" + options_.job_id + "': " + request.voter_address() +
                              " is not a node of the job: its vote is refused");
    }
  }
  return vote(request.voter_address(), request.epoch(), waiting);
}

StatusOr<v1::ElectResponse> CrossNode::vote(const std::string& voter, uint64_t epoch,
                                            const std::function<bool()>& waiting) {
  MutexLock lock(mutex_);
  const std::string self = options_.self_address;
  if (!options_.failover) return failedPrecondition(self + " does not fail over leaders (--leader-failover off)");
  v1::ElectResponse response;
  const size_t majority = book_.members().size() / 2 + 1;
  const auto deadline = CrossClock::now() + kElectionLimit;
  const auto answer = [&]() GS_REQUIRES(mutex_) -> StatusOr<v1::ElectResponse> {
    // The vote counts while its voter waits for the answer.
    while (ballot_.decided(epoch) == nullptr && !stopping_ && CrossClock::now() < deadline && waiting()) {
      formed_cv_.wait_until(lock, std::min(deadline, CrossClock::now() + std::chrono::milliseconds(100)));
    }
    if (ballot_.decided(epoch) == nullptr) {
      ballot_.withdraw(voter, epoch);
      return deadlineExceeded(self + " gathered " + std::to_string(ballot_.votes()) + " votes, " +
                              std::to_string(majority) + " needed (a strict majority of the job's daemons)");
    }
    *response.mutable_change() = *ballot_.decided(epoch);
    // Published when the change was announced: the voter reads the rest.
    v1::NewEpoch& change = *response.mutable_change();
    change.set_node_count(keepFirstPart(change.mutable_nodes(), published_.partBytes()));
    return response;
  };
  // Taking over from this epoch already (its epoch moved on meanwhile).
  if (ballot_.takingOverFrom(epoch)) return answer();
  if (epoch != book_.epoch()) {
    return failedPrecondition(self + " is at epoch " + std::to_string(book_.epoch()) + ", the vote is for epoch " +
                              std::to_string(epoch));
  }
  if (!formed_cv_.wait_for(lock, kCandidateNoticeLimit,
                           [&]() GS_REQUIRES(mutex_) { return ballot_.lostLeaderIn(epoch) || stopping_; })) {
    return failedPrecondition(self + " still hears the leader");
  }
  if (stopping_) return cancelled("job stopped");
  ASSIGN_OR_RETURN(const bool majority_reached, ballot_.receive(voter, epoch, majority));
  GS_LOG(control, info, "job '{}': vote of {} for {} to lead ({} of the {} needed)", options_.job_id, voter, self,
         ballot_.votes(), majority);
  if (majority_reached && !side().leads()) {
    ballot_.takingOver(epoch);
    ASSIGN_OR_RETURN(EpochPlan plan, takeOverLocked());
    lock.unlock();
    const v1::NewEpoch change = announceEpoch(std::move(plan));
    // This node's Job takes the new epoch before any follower can send a
    // request of it.
    if (hooks_.on_new_epoch) hooks_.on_new_epoch(change);
    lock.lock();
    ballot_.tookOver(change);
    formed_cv_.notify_all();
  }
  return answer();
}

StatusOr<CrossNode::EpochPlan> CrossNode::takeOverLocked() {
  // The voters open their streams to this daemon.
  streams_.takeOver(
      std::chrono::duration_cast<std::chrono::milliseconds>(CrossClock::now().time_since_epoch()).count());
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(book_.takeOver()));
  side_ = leader_side_.get();
  return plan;
}

}  // namespace gradsync::peer
