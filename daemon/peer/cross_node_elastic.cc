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
//    Every node interrupts its transfers of the old epoch; its next ring
//    re-forms with the new neighbours and epoch-keyed tags.
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
//    leader failover is on (cross_node_failover.cc).
#include <algorithm>
#include <chrono>
#include <thread>

#include "daemon/common/logging.h"
#include "daemon/peer/cross_node.h"

namespace gradsync::peer {
namespace {

constexpr auto kAskRetryDelay = std::chrono::milliseconds(50);

std::vector<int> ranksOf(const v1::NodeInfo& node) { return {node.ranks().begin(), node.ranks().end()}; }

}  // namespace

uint64_t CrossNode::epoch() const {
  MutexLock lock(mutex_);
  return epoch_;
}

int CrossNode::translateLocked(int rank, uint64_t epoch) const {
  if (epoch > epoch_) return -1;
  for (uint64_t e = epoch; e < epoch_; ++e) {
    auto it = survivors_.find(e);
    if (it == survivors_.end()) return -1;
    auto at = std::lower_bound(it->second.begin(), it->second.end(), rank);
    if (at == it->second.end() || *at != rank) return -1;
    rank = static_cast<int>(at - it->second.begin());
  }
  return rank;
}

StatusOr<v1::NewEpoch> CrossNode::beginEpoch(const std::vector<int>& lost, uint64_t epoch, const std::string& cause) {
  MutexLock lock(mutex_);
  if (members_.empty()) return failedPrecondition("job '" + options_.job_id + "' has not formed yet");
  std::vector<int> gone;
  for (int rank : lost) {
    const int now = translateLocked(rank, epoch);
    if (now >= 0) gone.push_back(now);
  }
  if (gone.empty()) return notFound("job '" + options_.job_id + "': the lost ranks are gone already");
  ASSIGN_OR_RETURN(EpochPlan plan, nextEpochLocked(gone, takeJoinersOfEmptiedLocked(gone), cause));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

std::vector<CrossNode::PendingJoiner> CrossNode::takeJoinersOfEmptiedLocked(const std::vector<int>& gone) {
  std::vector<PendingJoiner> taken;
  for (const auto& node : members_) {
    if (node.cross_rank() == 0) continue;  // the leader's node never empties: the job fails first
    const bool emptied = std::all_of(node.ranks().begin(), node.ranks().end(),
                                     [&](int rank) { return std::find(gone.begin(), gone.end(), rank) != gone.end(); });
    if (!emptied) continue;
    auto mine = std::stable_partition(pending_joiners_.begin(), pending_joiners_.end(),
                                      [&](const PendingJoiner& j) { return j.peer_address != node.peer_address(); });
    if (mine == pending_joiners_.end()) continue;
    GS_LOG(control, info,
           "job '{}': node {} lost its last rank while {} new ranks waited there: they join in the "
           "same epoch, and the node stays",
           options_.job_id, node.peer_address(), pending_joiners_.end() - mine);
    taken.insert(taken.end(), mine, pending_joiners_.end());
    pending_joiners_.erase(mine, pending_joiners_.end());
  }
  return taken;
}

StatusOr<v1::NewEpoch> CrossNode::admitJoiners(const std::vector<uint64_t>& local, const std::string& when) {
  MutexLock lock(mutex_);
  std::vector<PendingJoiner> joiners;
  for (uint64_t id : local) joiners.push_back({options_.self_address, id});
  joiners.insert(joiners.end(), pending_joiners_.begin(), pending_joiners_.end());
  pending_joiners_.clear();
  if (members_.empty()) return failedPrecondition("job '" + options_.job_id + "' has not formed yet");
  // Every rank was told this commit admits joiners and waits for the new
  // epoch: it comes even when the joiners left meanwhile.
  ASSIGN_OR_RETURN(
      EpochPlan plan,
      nextEpochLocked({}, joiners,
                      joiners.empty() ? "new ranks were to join " + when + ", and left meanwhile"
                                      : "admitted " + std::to_string(joiners.size()) + " new ranks " + when));
  lock.unlock();
  return announceEpoch(std::move(plan));
}

void CrossNode::joinerReport(Follower* follower, const v1::FollowerMessage& message) {
  MutexLock lock(mutex_);
  if (!options_.elastic) return;
  const std::string address = follower->node.peer_address();
  if (message.has_joiner_gone()) {
    const uint64_t id = message.joiner_gone().joiner_id();
    pending_joiners_.erase(
        std::remove_if(pending_joiners_.begin(), pending_joiners_.end(),
                       [&](const PendingJoiner& j) { return j.peer_address == address && j.id == id; }),
        pending_joiners_.end());
    return;
  }
  pending_joiners_.push_back({address, message.joiner_ready().joiner_id(), message.joiner_ready().pid()});
  GS_LOG(control, info, "job '{}': {} waits on node {} to join at the next commit ({} waiting across nodes)",
         options_.job_id, message.joiner_ready().description(), address, pending_joiners_.size());
}

StatusOr<v1::JoinJobResponse> CrossNode::acceptCandidate(const v1::JoinJobRequest& request) {
  MutexLock lock(mutex_);
  const std::string& address = request.node().peer_address();
  if (!options_.elastic) {
    return failedPrecondition("job '" + options_.job_id + "' is not elastic: " + describeNode(request.node()) +
                              " cannot join it");
  }
  if (members_.empty()) return notFound("job '" + options_.job_id + "' has not formed yet");  // retried
  if (!request.node().ranks().empty()) {
    return invalidArgument("job '" + options_.job_id + "': a node joining the running job holds no rank yet");
  }
  if (std::any_of(members_.begin(), members_.end(),
                  [&](const v1::NodeInfo& n) { return n.peer_address() == address; })) {
    return alreadyExists("job '" + options_.job_id + "': " + address + " is a node of the job already");
  }
  // A node removed earlier (its last rank died) comes back as a new one.
  removed_nodes_.erase(address);
  auto candidate = std::make_shared<Follower>();
  candidate->node = request.node();
  candidate->node.set_cross_rank(-1);
  candidates_[address] = candidate;  // a second join replaces the first
  GS_LOG(control, info,
         "job '{}': node {} (host {}) joins the running job for new ranks (a candidate until they "
         "are admitted)",
         options_.job_id, address, request.node().hostname());
  v1::JoinJobResponse response;
  response.set_epoch(epoch_);
  for (const auto& node : members_) *response.add_nodes() = node;
  return response;
}

void CrossNode::candidateLeft(const std::shared_ptr<Follower>& candidate) {
  MutexLock lock(mutex_);
  const std::string address = candidate->node.peer_address();
  auto it = candidates_.find(address);
  if (it == candidates_.end() || it->second != candidate) return;
  candidates_.erase(it);
  dropJoinersOfLocked(address);
  GS_LOG(control, info, "job '{}': candidate node {} left before its ranks were admitted", options_.job_id, address);
}

void CrossNode::dropJoinersOfLocked(const std::string& peer_address) {
  pending_joiners_.erase(std::remove_if(pending_joiners_.begin(), pending_joiners_.end(),
                                        [&](const PendingJoiner& j) { return j.peer_address == peer_address; }),
                         pending_joiners_.end());
}

std::vector<std::shared_ptr<CrossNode::Follower>> CrossNode::streamsLocked(bool candidates) const {
  std::vector<std::shared_ptr<Follower>> streams;
  for (const auto& [cross_rank, f] : followers_) streams.push_back(f);
  if (candidates) {
    for (const auto& [address, f] : candidates_) streams.push_back(f);
  }
  return streams;
}

void CrossNode::clearCache() {
  MutexLock lock(cache_mutex_);
  cache_.clear();
}

bool CrossNode::hasPendingJoiners() const {
  MutexLock lock(mutex_);
  return !pending_joiners_.empty();
}

StatusOr<CrossNode::EpochPlan> CrossNode::nextEpochLocked(const std::vector<int>& gone,
                                                          const std::vector<PendingJoiner>& joiners,
                                                          const std::string& cause) {
  std::vector<int> all;
  for (const auto& node : members_) all.insert(all.end(), node.ranks().begin(), node.ranks().end());
  std::sort(all.begin(), all.end());
  std::vector<int> survivors;
  for (int rank : all) {
    if (std::find(gone.begin(), gone.end(), rank) == gone.end()) survivors.push_back(rank);
  }
  EpochPlan plan;
  ASSIGN_OR_RETURN(auto nodes, nextMembersLocked(gone, survivors, joiners, cause, &plan.change));
  survivors_[epoch_] = survivors;
  ++epoch_;
  plan.change.set_epoch(epoch_);
  plan.change.set_cause(cause);
  for (int rank : survivors) plan.change.add_survivors(rank);
  for (const auto& node : nodes) *plan.change.add_nodes() = node;
  plan.change.set_below_minimum(plan.change.survivors_size() + plan.change.admitted_size() < options_.min_size);
  members_ = std::move(nodes);
  // The old epoch's transfers on this node end now (ring() lifts it).
  if (transport_ && transfers_aborted_.empty()) transport_->abort("the job moved to epoch " + std::to_string(epoch_));
  placeFollowersLocked(cause, &plan);
  return plan;
}

StatusOr<std::vector<v1::NodeInfo>> CrossNode::nextMembersLocked(const std::vector<int>& gone,
                                                                 const std::vector<int>& survivors,
                                                                 const std::vector<PendingJoiner>& joiners,
                                                                 const std::string& cause, v1::NewEpoch* change) {
  const auto renumbered = [&](int rank) {
    return static_cast<int>(std::lower_bound(survivors.begin(), survivors.end(), rank) - survivors.begin());
  };
  std::vector<v1::NodeInfo> nodes;
  // Candidates with a joiner to admit become members, after the others.
  std::vector<v1::NodeInfo> placed = members_;
  for (const auto& candidate : candidates_) {
    const std::string& address = candidate.first;
    const bool admits =
        std::any_of(joiners.begin(), joiners.end(), [&](const PendingJoiner& j) { return j.peer_address == address; });
    if (admits) placed.push_back(candidate.second->node);
  }
  for (const auto& node : placed) {
    v1::NodeInfo next = node;
    next.clear_ranks();
    next.clear_pids();
    for (int i = 0; i < node.ranks_size(); ++i) {
      if (std::find(gone.begin(), gone.end(), node.ranks(i)) != gone.end()) continue;
      next.add_ranks(renumbered(node.ranks(i)));
      next.add_pids(i < node.pids_size() ? node.pids(i) : 0);
    }
    // Joiners after every survivor, in the order they came.
    for (const auto& joiner : joiners) {
      if (joiner.peer_address != node.peer_address()) continue;
      auto* admitted = change->add_admitted();
      admitted->set_peer_address(joiner.peer_address);
      admitted->set_joiner_id(joiner.id);
      admitted->set_rank(static_cast<int>(survivors.size()) + change->admitted_size() - 1);
      next.add_ranks(admitted->rank());
      next.add_pids(joiner.pid);
    }
    if (next.ranks().empty()) {
      if (node.cross_rank() == 0) {
        return failedPrecondition(cause + "; the leader's node (" + options_.self_address +
                                  ") would hold no rank, and the leader does not move");
      }
      continue;
    }
    nodes.push_back(std::move(next));
  }
  // The leader first, then by lowest rank: the ring order.
  std::sort(nodes.begin() + 1, nodes.end(),
            [](const v1::NodeInfo& a, const v1::NodeInfo& b) { return a.ranks(0) < b.ranks(0); });
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].set_cross_rank(static_cast<int>(i));
  return nodes;
}

void CrossNode::placeFollowersLocked(const std::string& cause, EpochPlan* plan) {
  std::map<int, std::shared_ptr<Follower>> followers;
  for (auto& [cross_rank, f] : followers_) {
    const std::string& address = f->node.peer_address();
    auto it = std::find_if(members_.begin(), members_.end(),
                           [&](const v1::NodeInfo& n) { return n.peer_address() == address; });
    if (it == members_.end()) {
      f->removed = describeNode(f->node) + " was removed from job '" + options_.job_id + "' at epoch " +
                   std::to_string(epoch_) + " (" + cause + "); anything it sends is refused as stale";
      plan->removed.emplace_back(f, f->removed);
      removed_nodes_[f->node.peer_address()] = f->removed;
      continue;
    }
    f->node = *it;
    followers[it->cross_rank()] = f;
    plan->kept.push_back(f);
  }
  for (auto it = candidates_.begin(); it != candidates_.end();) {
    auto member = std::find_if(members_.begin(), members_.end(),
                               [&](const v1::NodeInfo& n) { return n.peer_address() == it->first; });
    if (member == members_.end()) {
      ++it;
      continue;
    }
    GS_LOG(control, info, "job '{}': node {} joins the job at epoch {} as node {}", options_.job_id, it->first, epoch_,
           member->cross_rank());
    it->second->node = *member;
    followers[member->cross_rank()] = it->second;
    plan->kept.push_back(it->second);
    it = candidates_.erase(it);
  }
  followers_ = std::move(followers);
}

v1::NewEpoch CrossNode::announceEpoch(EpochPlan plan) {
  formed_cv_.notify_all();
  v1::LeaderMessage message;
  *message.mutable_new_epoch() = plan.change;
  {
    // Every stream sees the batches encoded with the old cache before the
    // NewEpoch, and those encoded with the new one after it.
    MutexLock order(order_mutex_);
    clearCache();
    for (auto& f : plan.kept) {
      MutexLock write_lock(f->write_mutex);
      if (f->stream) f->stream->Write(message);
    }
  }
  for (auto& [f, why] : plan.removed) {
    GS_LOG(control, warn, "job '{}': {}", options_.job_id, why);
    tellStale(f.get(), why);
  }
  return plan.change;
}

void CrossNode::applyNewEpoch(const v1::NewEpoch& change) {
  std::string removed;
  {
    MutexLock lock(mutex_);
    if (change.epoch() <= epoch_) return;
    auto self = std::find_if(change.nodes().begin(), change.nodes().end(),
                             [&](const v1::NodeInfo& n) { return n.peer_address() == options_.self_address; });
    if (self == change.nodes().end()) {
      removed_ = true;
      removed = "this node was removed from job '" + options_.job_id + "' at epoch " + std::to_string(change.epoch()) +
                " (" + change.cause() + ")";
    } else {
      epoch_ = change.epoch();
      members_.assign(change.nodes().begin(), change.nodes().end());
      self_cross_rank_ = self->cross_rank();
      clearCache();  // as the leader did before it sent the change
      if (transport_ && transfers_aborted_.empty()) {
        transport_->abort("the job moved to epoch " + std::to_string(epoch_));
      }
    }
  }
  formed_cv_.notify_all();
  if (!removed.empty()) {
    hooks_.on_failure(removed, true);
    return;
  }
  if (hooks_.on_new_epoch) hooks_.on_new_epoch(change);
}

void CrossNode::reportJoiner(uint64_t id, int64_t pid, const std::string& description) {
  v1::FollowerMessage message;
  message.mutable_joiner_ready()->set_joiner_id(id);
  message.mutable_joiner_ready()->set_pid(pid);
  message.mutable_joiner_ready()->set_description(description);
  writeToLeader(message);
}

void CrossNode::reportJoinerGone(uint64_t id) {
  v1::FollowerMessage message;
  message.mutable_joiner_gone()->set_joiner_id(id);
  writeToLeader(message);
}

void CrossNode::reportRankLost(int rank, uint64_t epoch, const std::string& cause) {
  v1::FollowerMessage message;
  message.mutable_rank_lost()->set_rank(rank);
  message.mutable_rank_lost()->set_epoch(epoch);
  message.mutable_rank_lost()->set_cause(cause);
  writeToLeader(message);
}

StatusOr<v1::CheckMemberResponse> CrossNode::checkMember(const v1::CheckMemberRequest& request) const {
  if (request.token() != options_.token) return unauthenticated("job '" + options_.job_id + "': token does not match");
  MutexLock lock(mutex_);
  v1::CheckMemberResponse response;
  response.set_epoch(epoch_);
  auto it = removed_nodes_.find(request.peer_address());
  if (it != removed_nodes_.end()) {
    response.set_removed(it->second);
    return response;
  }
  response.set_member(std::any_of(members_.begin(), members_.end(), [&](const v1::NodeInfo& node) {
    return node.peer_address() == request.peer_address();
  }));
  return response;
}

std::string CrossNode::askIfRemoved() {
  if (!options_.elastic || !channel_) return "";
  v1::CheckMemberRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_peer_address(options_.self_address);
  // A channel of its own: the stream's channel may be what broke (this
  // daemon was paused and its keepalive watchdog fired), and a call on a
  // connection that is going down fails with the same transport error.
  // The question is asked again until the deadline.
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(
      channel_address_, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials()));
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  v1::CheckMemberResponse response;
  grpc::Status status;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    context.set_wait_for_ready(true);
    status = stub->CheckMember(&context, request, &response);
    if (status.ok() || std::chrono::system_clock::now() + kAskRetryDelay >= deadline) break;
    std::this_thread::sleep_for(kAskRetryDelay);
  }
  if (!status.ok()) {
    GS_LOG(control, warn, "job '{}': could not ask the leader {} whether this node is still a member: {}",
           options_.job_id, channel_address_, status.error_message());
    return "";
  }
  if (response.member()) return "";
  return response.removed().empty()
             ? "this node is no longer in job '" + options_.job_id + "' (the leader is at epoch " +
                   std::to_string(response.epoch()) + "): refused as stale"
             : response.removed();
}

bool CrossNode::refuseIfRemoved(Follower* follower) {
  std::string why;
  {
    MutexLock lock(mutex_);
    if (follower->removed.empty()) return false;
    why = follower->removed;
  }
  tellStale(follower, why);
  return true;
}

void CrossNode::tellStale(Follower* follower, const std::string& why) {
  v1::LeaderMessage notice;
  notice.mutable_failure()->set_message(why);
  notice.mutable_failure()->set_node_lost(true);
  notice.mutable_failure()->set_removed(true);
  MutexLock lock(follower->write_mutex);
  if (follower->stream) follower->stream->Write(notice);
}

void CrossNode::nodeLost(const v1::NodeInfo& node, uint64_t epoch, const std::string& cause) {
  if (options_.elastic && hooks_.on_ranks_lost) {
    {
      // Its joiners went with it: the new epoch must not admit them.
      MutexLock lock(mutex_);
      dropJoinersOfLocked(node.peer_address());
    }
    hooks_.on_ranks_lost(ranksOf(node), epoch, cause);
    return;
  }
  hooks_.on_failure(cause, true);
  announceFailure(cause, true);
}

bool CrossNode::selfPaused(CrossClock::time_point now) {
  // The first tick counts as after a pause: this daemon may have been
  // stopped between joining and it, so the silence clocks start here.
  const bool paused =
      last_tick_ == CrossClock::time_point() || now - last_tick_ > std::chrono::milliseconds(kSilenceLimitMs / 2);
  last_tick_ = now;
  return paused;
}

}  // namespace gradsync::peer
