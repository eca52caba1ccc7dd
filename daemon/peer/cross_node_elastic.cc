// SPDX-License-Identifier: Apache-2.0
// CrossNode, elastic jobs: what happens when a rank or a node of a job
// spanning daemons is lost and the job goes on.
//
//  - A follower's rank crashes: the follower reports it (RankLost); the
//    leader's own ranks go straight to the Job.
//  - A follower's node is lost (its stream breaks, or it is silent for
//    kSilenceLimitMs): the leader takes all its ranks as lost.
//  - The leader decides the next epoch (beginEpoch): survivors keep their
//    order and are renumbered, nodes left without ranks are removed, and
//    every remaining follower is told (NewEpoch) before any batch of the
//    new epoch. A follower left without ranks whose new ranks wait to join
//    (reported before its loss) keeps its place: they join in that epoch.
//    Every node interrupts its transfers of the old epoch (and its NCCL
//    calls among the daemons: epochRuns); its next ring re-forms with the
//    new neighbours and epoch-keyed tags, and its daemons' NCCL
//    communicator from the epoch's new id (NewEpoch.nccl_unique_id).
//  - A removed node that speaks again (it was paused, say) is told it is
//    stale and its job fails there; its abort notices are refused by the
//    others (acceptAbort), and its data-plane messages carry the old
//    epoch's tags, which match nothing any more.
//  - Fewer ranks than the job's minimum: the epoch is below_minimum (no
//    rank is told its place) until joiners come, admitted at once.
//  - A node without ranks of the job joins for its new ranks as a
//    candidate (acceptCandidate) and becomes a member in the epoch that
//    admits them.
//  - Losing the leader fails the job on every node, naming it, unless
//    leader failover is on (leader_election.h).
#include <algorithm>
#include <chrono>
#include <thread>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
#include "daemon/peer/cross_node.h"
#include "daemon/peer/leader_side.h"

namespace gradsync::peer {
uint64_t CrossNode::epoch() const {
  MutexLock lock(mutex_);
  return book_.epoch();
}

StatusOr<v1::NewEpoch> CrossNode::beginEpoch(const std::vector<int>& lost, uint64_t epoch, const std::string& cause) {
  MutexLock lock(mutex_);
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(book_.lose(lost, epoch, cause)));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

StatusOr<v1::NewEpoch> CrossNode::admitJoiners(const std::vector<uint64_t>& local, const std::string& when) {
  MutexLock lock(mutex_);
  RETURN_IF_ERROR(majorityLocked("", CrossClock::now()));
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(book_.admit(local, when)));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

void CrossNode::joinerReport(Follower* follower, const v1::FollowerMessage& message) {
  MutexLock lock(mutex_);
  if (!options_.elastic) return;
  const std::string& address = follower->peerAddress();
  if (message.has_joiner_gone()) {
    book_.removeJoiner(address, message.joiner_gone().joiner_id());
    return;
  }
  book_.addJoiner({address, message.joiner_ready().joiner_id(), message.joiner_ready().pid()});
  GS_LOG(control, info, "job '{}': {} waits on node {} to join at the next commit ({} waiting across nodes)",
         options_.job_id, message.joiner_ready().description(), address, book_.joinerCount());
}

StatusOr<v1::JoinJobResponse> CrossNode::acceptCandidate(const v1::JoinJobRequest& request) {
  MutexLock lock(mutex_);
  const std::string& address = request.node().peer_address();
  if (!options_.elastic) {
    return failedPrecondition("job '" + options_.job_id +
                              "' is not elastic: " + membership::describeNode(request.node()) + " cannot join it");
  }
  RETURN_IF_ERROR(book_.addCandidate(request.node()));
  streams_.addCandidate(request.node());  // a second join replaces the first
  GS_LOG(control, info,
         "job '{}': node {} (host {}) joins the running job for new ranks (a candidate until they "
         "are admitted)",
         options_.job_id, address, request.node().hostname());
  v1::JoinJobResponse response;
  response.set_epoch(book_.epoch());
  for (const auto& node : book_.members()) *response.add_nodes() = node;
  response.set_node_count(publishLocked(book_.epoch(), response.mutable_nodes()));
  return response;
}

void CrossNode::candidateLeft(const std::shared_ptr<Follower>& candidate) {
  MutexLock lock(mutex_);
  const std::string& address = candidate->peerAddress();
  if (!streams_.dropCandidate(candidate.get())) return;
  book_.dropCandidate(address);
  GS_LOG(control, info, "job '{}': candidate node {} left before its ranks were admitted", options_.job_id, address);
}

bool CrossNode::hasPendingJoiners() const {
  MutexLock lock(mutex_);
  return book_.joinerCount() > 0;
}

void CrossNode::endOldEpochTransfersLocked() {
  // ring() lifts it for the new epoch; a job that failed keeps its reason.
  if (transfers_aborted_.empty()) {
    mesh_.abort("the job moved to epoch " + std::to_string(book_.epoch()));
  }
}

StatusOr<CrossNode::EpochPlan> CrossNode::planEpochLocked(StatusOr<v1::NewEpoch> decided) {
  RETURN_IF_ERROR(decided.status());
  EpochPlan plan;
  plan.change = std::move(decided).value();
  endOldEpochTransfersLocked();
  // The daemons' NCCL communicator of the new epoch forms from a new id
  // (none while the job waits below its minimum: it runs nothing).
  if (plan.change.below_minimum()) {
    nccl_id_.clear();
  } else {
    makeNcclIdLocked();
  }
  plan.change.set_nccl_unique_id(nccl_id_);
  plan.followers = streams_.renumber(book_);
  return plan;
}

v1::NewEpoch CrossNode::announceEpoch(EpochPlan plan) {
  formed_cv_.notify_all();
  v1::LeaderMessage message;
  *message.mutable_new_epoch() = plan.change;
  {
    MutexLock lock(mutex_);
    v1::NewEpoch& change = *message.mutable_new_epoch();
    change.set_node_count(publishLocked(change.epoch(), change.mutable_nodes()));
  }
  {
    // Every stream sees the batches encoded with the old cache before the
    // NewEpoch, and those encoded with the new one after it.
    MutexLock order(order_mutex_);
    codec_.clear();
    const SharedMessage shared = share(std::move(message));
    for (auto& f : plan.followers.kept) f->stream.send(shared);
  }
  for (auto& [f, why] : plan.followers.removed) {
    GS_LOG(control, warn, "job '{}': {}", options_.job_id, why);
    tellStale(f.get(), why);
  }
  return plan.change;
}

void CrossNode::applyNewEpoch(const v1::NewEpoch& change) {
  std::string removed;
  {
    MutexLock lock(mutex_);
    switch (book_.apply(change)) {
      case membership::EpochBook::Applied::kStale:
        return;
      case membership::EpochBook::Applied::kRemoved:
        notices_.removed();
        removed = "this node was removed from job '" + options_.job_id + "' at epoch " +
                  std::to_string(change.epoch()) + " (" + change.cause() + ")";
        break;
      case membership::EpochBook::Applied::kApplied:
        codec_.clear();  // as the leader did before it sent the change
        nccl_id_ = change.nccl_unique_id();
        endOldEpochTransfersLocked();
        break;
    }
  }
  formed_cv_.notify_all();
  if (!removed.empty()) {
    failureDetected(removed, true);
    return;
  }
  if (hooks_.on_new_epoch) hooks_.on_new_epoch(change);
}

StatusOr<v1::CheckMemberResponse> CrossNode::checkMember(const v1::CheckMemberRequest& request) const {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  MutexLock lock(mutex_);
  return book_.check(request.peer_address());
}

bool CrossNode::refuseIfRemoved(Follower* follower) {
  const std::string why = follower->removed();
  if (why.empty()) return false;
  tellStale(follower, why);
  return true;
}

void CrossNode::tellStale(Follower* follower, const std::string& why) {
  v1::LeaderMessage notice;
  notice.mutable_failure()->set_message(why);
  notice.mutable_failure()->set_node_lost(true);
  notice.mutable_failure()->set_removed(true);
  follower->stream.send(std::move(notice));
}

StatusOr<v1::NewEpoch> CrossNode::takeOver(uint64_t epoch) {
  EpochPlan plan;
  {
    MutexLock lock(mutex_);
    if (stopping_) return cancelled("job '" + options_.job_id + "' stopped");
    if (book_.epoch() != epoch) {
      return failedPrecondition(options_.self_address + " moved to epoch " + std::to_string(book_.epoch()) +
                                " while it won the vote of epoch " + std::to_string(epoch));
    }
    ASSIGN_OR_RETURN(plan, takeOverLocked());
  }
  const v1::NewEpoch change = announceEpoch(std::move(plan));
  // This node's Job takes the new epoch before any follower can send a
  // request of it (the voters are answered after this returns).
  if (hooks_.on_new_epoch) hooks_.on_new_epoch(change);
  formed_cv_.notify_all();
  return change;
}

StatusOr<CrossNode::EpochPlan> CrossNode::takeOverLocked() {
  // The voters open their streams to this daemon.
  streams_.takeOver(nowMs(CrossClock::now()));
  ASSIGN_OR_RETURN(EpochPlan plan, planEpochLocked(book_.takeOver()));
  side_ = leader_side_.get();
  return plan;
}

bool CrossNode::electing() const { return election_.electing(epoch()); }

}  // namespace gradsync::peer
