// SPDX-License-Identifier: Apache-2.0
// CrossNode, follower side: joining the leader and the coordination stream.
#include <algorithm>
#include <condition_variable>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
#include "daemon/peer/cross_node.h"

namespace gradsync::peer {

Status CrossNode::joinLeader(const v1::NodeInfo& self) {
  if (options_.leader_address.empty()) {
    return failedPrecondition("job '" + options_.job_id +
                              "' spans nodes but its ranks gave no leader address "
                              "(GRADSYNC_LEADER)");
  }
  link_.connect(options_.leader_address);
  ASSIGN_OR_RETURN(const v1::JoinJobResponse joined,
                   leader_join_.join(link_.channel(), link_.stub().get(), joinRequest(self)));
  {
    MutexLock lock(mutex_);
    joinedLocked(joined);
  }
  openStream();
  if (self.ranks().empty()) {
    GS_LOG(control, info,
           "job '{}': joined the running job (epoch {}) at {} as a candidate node: its new ranks wait "
           "for the next commit",
           options_.job_id, epoch(), options_.leader_address);
  } else {
    GS_LOG(control, info, "job '{}': joined the leader at {} as node {}", options_.job_id, options_.leader_address,
           selfCrossRank());
  }
  return okStatus();
}

v1::JoinJobRequest CrossNode::joinRequest(const v1::NodeInfo& self) const {
  v1::JoinJobRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_size(options_.size);
  for (const auto& set : options_.process_sets) {
    auto* spec = request.add_process_sets();
    for (int r : set) spec->add_ranks(r);
  }
  *request.mutable_node() = self;
  request.set_elastic_join(options_.elastic && self.ranks().empty());
  options_.protocol.stamp(&request);
  return request;
}

void CrossNode::joinedLocked(const v1::JoinJobResponse& response) {
  // A candidate joins a running job (at its epoch, not a member yet).
  book_.form({response.nodes().begin(), response.nodes().end()}, std::max<uint64_t>(1, response.epoch()));
  nccl_id_ = response.nccl_unique_id();
  formed_cv_.notify_all();
}

void CrossNode::openStream() {
  v1::FollowerMessage hello;
  hello.mutable_hello()->set_job_id(options_.job_id);
  hello.mutable_hello()->set_token(options_.token);
  {
    MutexLock lock(mutex_);
    hello.mutable_hello()->set_cross_rank(book_.selfCrossRank());
  }
  hello.mutable_hello()->set_peer_address(options_.self_address);
  options_.protocol.stamp(hello.mutable_hello());
  link_.open(hello);
}

void CrossNode::readLeader() {
  for (;;) {
    // Once the stream ends, writes wait in the link: after a failover the
    // new leader's stream sends them.
    const grpc::Status status = link_.read([this](const v1::LeaderMessage& m) { onLeaderMessage(m); });
    batch_parts_.reset();  // a batch cut short with its stream
    {
      MutexLock lock(mutex_);
      if (stopping_) break;
    }
    // An elastic job's leader may have removed this node (it was paused,
    // say): then this node is what was lost, and it says so.
    const std::string removed = status.ok() ? "" : askIfRemoved();
    if (removed.empty() && !status.ok() && options_.failover) {
      auto leading = election_.run("lost the leader " + leaderDescription() + ": " + status.error_message());
      if (!leading.isOk()) {
        leaderLost(leading.status().message());
        break;
      }
      if (*leading) break;  // this daemon leads now: no leader stream to read
      continue;             // following the new leader
    }
    if (!removed.empty()) {
      notices_.removed();
      failureDetected(removed, true);
    } else if (status.ok()) {
      failureDetected("the leader " + leaderDescription() + " closed the job (its ranks finished)", false);
    } else {
      leaderLost("lost the leader " + leaderDescription() + ": " + status.error_message());
    }
    break;
  }
  {
    MutexLock lock(mutex_);
    reader_done_ = true;
  }
  formed_cv_.notify_all();
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

std::string CrossNode::leaderDescription() const {
  MutexLock lock(mutex_);
  for (const auto& node : book_.members()) {
    if (node.cross_rank() == 0) return membership::describeNode(node);
  }
  return options_.leader_address;
}

void CrossNode::onLeaderMessage(const v1::LeaderMessage& message) {
  codec_.countReceived(message.ByteSizeLong());
  if (message.has_round()) {
    LeaderRounds* rounds;
    {
      MutexLock lock(mutex_);
      rounds = roundsLocked();
    }
    if (rounds != nullptr) rounds->deliver(message.round(), 0);
    return;
  }
  if (message.has_batch()) {
    auto assembled = batch_parts_.add(message.batch());
    if (!assembled.isOk()) {
      failureDetected("job '" + options_.job_id + "': " + assembled.status().message(), true);
      return;
    }
    if (!assembled->has_value()) return;  // more parts follow
    const v1::Batch& whole = **assembled;
    std::vector<coordinator::Response> batch;
    for (const auto& r : whole.responses()) {
      auto response = codec_.decode(r);
      if (!response.isOk()) {
        failureDetected(response.status().message(), true);
        break;
      }
      batch.push_back(std::move(response).value());
    }
    hooks_.on_batch(std::move(batch), whole.sequence(), whole.epoch(), whole.fusion_threshold_bytes());
  } else if (message.has_failure()) {
    if (message.failure().removed()) notices_.removed();
    heardFailure(message.failure(), "the leader " + leaderDescription());
  } else if (message.has_new_epoch() && message.new_epoch().node_count() == 0) {
    applyNewEpoch(message.new_epoch());
  } else if (message.has_new_epoch()) {
    v1::NewEpoch change = message.new_epoch();
    const Status read = readRestOfMembers(link_.stub().get(), options_.job_id, options_.token, change.epoch(),
                                          change.node_count(), change.mutable_nodes());
    if (!read.isOk()) {
      leaderLost(read.message());
      return;
    }
    applyNewEpoch(change);
  }
}

void CrossNode::writeToLeader(v1::FollowerMessage message) { link_.write(std::move(message)); }

void CrossNode::forward(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
  v1::FollowerMessage message;
  *message.mutable_request() = codec_.compact(rank, enqueue, epoch);
  writeToLeader(std::move(message));
}

void CrossNode::tellOtherFollowers(const v1::JobFailure& failure) {
  v1::AbortJobRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  *request.mutable_failure() = failure;
  request.set_from_peer_address(options_.self_address);
  MutexLock lock(mutex_);
  if (abort_notices_ || stopping_) return;
  request.set_epoch(book_.epoch());
  // The members are in cross-rank order; the leader (cross rank 0) is not
  // told.
  const auto& members = book_.members();
  const size_t followers = members.empty() ? 0 : members.size() - 1;
  size_t self = followers;
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i].peer_address() == options_.self_address) self = i - 1;
  }
  if (self == followers) return;  // not a follower of this membership
  std::vector<std::string> addresses;
  for (size_t relay : AbortNotices::relaysOf(self, followers)) addresses.push_back(members[relay + 1].peer_address());
  // Asynchronous: the calls start here and answer on gRPC's threads.
  abort_notices_ = AbortNotices::send(std::move(request), addresses, options_.credentials);
}

void CrossNode::waitForAbortNotices() {
  std::shared_ptr<AbortNotices> notices;
  {
    MutexLock lock(mutex_);
    notices = abort_notices_;
  }
  if (notices) notices->wait();
}

Status CrossNode::acceptAbort(const v1::AbortJobRequest& request) {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  {
    MutexLock lock(mutex_);
    const bool member = book_.member(request.from_peer_address()) != nullptr;
    // Only a node of the job may end it (once formed, every member is
    // known here; while it forms, a node that joined after this one may
    // not be yet).
    if (!options_.elastic && !member && book_.formed()) {
      GS_LOG(control, warn, "job '{}': refused an abort notice from {}, not a node of the job", options_.job_id,
             request.from_peer_address());
      return permissionDenied("job '" + options_.job_id + "': " + request.from_peer_address() +
                              " is not a node of the job: its abort notice is refused");
    }
    const uint64_t epoch = book_.epoch();
    if (options_.elastic && (request.epoch() != epoch || !member)) {
      GS_LOG(control, warn, "job '{}': refused a stale abort notice from {} (its epoch {}, this node's {}): {}",
             options_.job_id, request.from_peer_address(), request.epoch(), epoch, request.failure().message());
      return failedPrecondition("job '" + options_.job_id + "' is at epoch " + std::to_string(epoch) + " without " +
                                request.from_peer_address() + ": its notice is stale");
    }
  }
  side().relayAbort(request.failure());
  heardFailure(request.failure(), request.from_peer_address());
  return okStatus();
}

void CrossNode::heardFailure(const v1::JobFailure& failure, const std::string& from, const Follower* teller) {
  side().heard(failure, teller);
  hooks_.on_failure({failure.message(), failure.node_lost(), from});
}

void CrossNode::failureDetected(std::string cause, bool node_lost) {
  // A node whose ranks finished after the job's failure was told or heard
  // (told it, they exited) is that failure's consequence: it must not
  // become the job's cause here.
  if (!node_lost && notices_.failureKnown()) {
    GS_LOG(control, info, "job '{}': after its failure, {}", options_.job_id, cause);
    return;
  }
  if (notices_.jobRunning()) announceFailure(namedCause(cause), node_lost);
  hooks_.on_failure({std::move(cause), node_lost, /*heard_from=*/""});
}

void CrossNode::leaderLost(std::string cause) {
  if (notices_.jobRunning()) {
    announceFailure(namedCause(cause), /*node_lost=*/true, /*teller=*/nullptr, FailureNotices::Route::kAroundTheLeader);
  }
  hooks_.on_failure({std::move(cause), /*node_lost=*/true, /*heard_from=*/""});
}

}  // namespace gradsync::peer
