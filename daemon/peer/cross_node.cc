// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/cross_node.h"

#include <algorithm>
#include <cstdio>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
#include "daemon/peer/leader_followers.h"
#include "daemon/peer/leader_side.h"

namespace gradsync::peer {
namespace {

constexpr auto kHeartbeatPeriod = std::chrono::seconds(1);

// FNV-1a 64 in hex: enough to see that every node holds the same id.
std::string digest(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace

// What the leader election asks of this node.
class CrossNode::ElectionHost final : public LeaderElection::Host {
 public:
  explicit ElectionHost(CrossNode* node) : node_(node) {}
  uint64_t membership(std::vector<v1::NodeInfo>* members) const override {
    uint64_t epoch;
    *members = node_->membership_.members(&epoch);
    return epoch;
  }
  uint64_t memberCount(size_t* count) const override {
    uint64_t epoch;
    *count = node_->membership_.memberCount(&epoch);
    return epoch;
  }
  bool isMember(const std::string& address) const override { return node_->membership_.isMember(address); }
  bool leads() const override { return node_->side().leads(); }
  StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) override { return node_->leader_side_->takeOver(epoch); }
  Status followElected(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel,
                       v1::ElectResponse answer) override {
    return node_->follower_->follow(leader, channel, std::move(answer));
  }

 private:
  CrossNode* const node_;
};

// What the follower's side asks of this node: the membership, the job's
// hooks, the election, the failure's way.
class CrossNode::FollowerHost final : public FollowerSide::Host {
 public:
  explicit FollowerHost(CrossNode* node) : node_(node) {}
  void joined(const v1::JoinJobResponse& response) override {
    // A candidate joins a running job (at its epoch, not a member yet).
    node_->membership_.joined({response.nodes().begin(), response.nodes().end()}, response.epoch(),
                              response.nccl_unique_id());
  }
  uint64_t epoch() const override { return node_->epoch(); }
  int selfCrossRank() const override { return node_->selfCrossRank(); }
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const override { return node_->members(epoch); }
  bool stopping() const override { return node_->membership_.stopping(); }
  void round(const v1::RoundMessage& message) override {
    if (LeaderRounds* rounds = node_->rounds(); rounds != nullptr) rounds->deliver(message, 0);
  }
  void batch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
             uint64_t fusion_threshold_bytes) override {
    node_->hooks_.on_batch(std::move(batch), sequence, epoch, fusion_threshold_bytes);
  }
  void newEpoch(const v1::NewEpoch& change) override { node_->applyNewEpoch(change); }
  StatusOr<bool> elect(const std::string& cause) override { return node_->election_.run(cause); }
  void failureDetected(std::string cause, bool node_lost) override {
    node_->failures_.detected(std::move(cause), node_lost);
  }
  void heardFailure(const v1::JobFailure& failure, const std::string& from) override {
    node_->failures_.heard(failure, from);
  }
  void leaderLost(std::string cause) override { node_->failures_.leaderLost(std::move(cause)); }

 private:
  CrossNode* const node_;
};

CrossNode::CrossNode(CrossNodeOptions options, Hooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      election_host_(std::make_unique<ElectionHost>(this)),
      election_({options_.job_id, options_.token, options_.self_address, options_.credentials, options_.failover,
                 options_.membership_part_bytes},
                election_host_.get()),
      endpoints_(options_.job_id, options_.token, options_.self_address, &membership_,
                 [this]() -> const NodeSide& { return side(); }),
      membership_(options_.job_id, options_.self_address, options_.min_size, options_.make_nccl_id,
                  [this](const std::string& reason) { endpoints_.abort(reason); }),
      failures_(
          options_.job_id, [this]() -> NodeSide& { return side(); }, hooks_.on_failure),
      codec_(options_.job_id, options_.response_cache_capacity),
      follower_host_(std::make_unique<FollowerHost>(this)),
      follower_(std::make_unique<FollowerSide>(options_, &codec_, &failures_.notices(), follower_host_.get())),
      leader_side_(std::make_unique<LeaderSide>(this)),
      side_(follower_.get()) {}

CrossNode::~CrossNode() {
  membership_.stop();
  const JoinDesk::Answers joins = leader_side_->dueJoins(CrossClock::now());
  follower_->stopJoining();
  election_.stop();
  for (auto& [answer, result] : joins) answer(std::move(result));
  abortRounds("job '" + options_.job_id + "' stopped");
  // Before the data plane closes: the follower's AbortJob calls carry the cause.
  follower_->leave();
  // After the streams ended: the leader's job may wait for them to end
  // before it says goodbye too.
  endpoints_.sayGoodbye(failures_.notices().nodeLost());
  // endpoints_, destroyed after this, drive what was sent until it left (the
  // executor thread has ended: this thread may drive the transport).
}

void CrossNode::start(const std::vector<int>& local_ranks, const std::vector<int64_t>& pids) {
  const bool leads = std::find(local_ranks.begin(), local_ranks.end(), 0) != local_ranks.end();
  side_ = leads ? static_cast<NodeSide*>(leader_side_.get()) : follower_.get();
  Status opened = endpoints_.open(options_.data_plane);
  if (!opened.isOk()) {
    failures_.detected("cannot start the UCX data plane: " + opened.message(), true);
    return;
  }
  v1::NodeInfo self;
  self.set_peer_address(options_.self_address);
  self.set_hostname(options_.hostname);
  self.set_topology(options_.topology);
  for (int r : local_ranks) self.add_ranks(r);
  for (int64_t p : pids) self.add_pids(p);
  self.set_ucx_address(endpoints_.address());
  self.set_gpus(options_.gpus);
  self.set_nccl(options_.nccl);
  self.set_steady_state_rounds(options_.steady_state_rounds);
  self.set_link_cost(options_.link_cost);
  self.set_leader_rounds(options_.leader_rounds);
  if (leads) {
    leader_side_->open(self);
    GS_LOG(control, info, "job '{}': leading; waiting for the other nodes to join", options_.job_id);
    return;
  }
  follower_->start(std::move(self));
}

void CrossNode::acceptJoin(const v1::JoinJobRequest& request, JoinAnswer answer) {
  leader_side_->acceptJoin(request, std::move(answer));
}

grpc::Status CrossNode::serveFollower(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                                      std::unique_ptr<FollowerSession>* session) {
  return leader_side_->followers().serve(hello, std::move(stream), session);
}

Status CrossNode::broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence, uint64_t epoch,
                            uint64_t fusion_threshold_bytes) {
  return leader_side_->broadcast(batch, sequence, epoch, fusion_threshold_bytes);
}

void CrossNode::sendError(const coordinator::Request& request, const Status& status) {
  leader_side_->sendError(request, status);
}

std::vector<int> CrossNode::missingRanks() const { return leader_side_->missingRanks(); }

StatusOr<v1::MembersResponse> CrossNode::membersPart(const v1::MembersRequest& request) const {
  return leader_side_->membersPart(request);
}

void CrossNode::failedHere(const std::string& cause, bool node_lost) { failures_.jobDetected(cause, node_lost); }

void CrossNode::jobStopped() { failures_.jobStopped(); }

Status CrossNode::acceptAbort(const v1::AbortJobRequest& request) {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  RETURN_IF_ERROR(membership_.checkAbortNotice(request.from_peer_address(), request.epoch(), options_.elastic,
                                               request.failure().message()));
  side().relayAbort(request.failure());
  failures_.heard(request.failure(), request.from_peer_address());
  return okStatus();
}

void CrossNode::abortTransfers(const std::string& reason) {
  membership_.endTransfers(reason);
  follower_->abortJoin(reason);
  abortRounds(reason);
}

bool CrossNode::formed() const { return membership_.formed(); }

bool CrossNode::steadyStateRounds() const {
  return !options_.elastic && membership_.everyMemberOffers(&v1::NodeInfo::steady_state_rounds);
}

LeaderRounds* CrossNode::rounds() {
  MutexLock lock(rounds_mutex_);
  // Once formed, where not every node runs rounds among the daemons and
  // every node offered rounds through the leader.
  if (rounds_ || options_.elastic || !membership_.formed() ||
      membership_.everyMemberOffers(&v1::NodeInfo::steady_state_rounds) ||
      !membership_.everyMemberOffers(&v1::NodeInfo::leader_rounds)) {
    return rounds_.get();
  }
  rounds_ = side().makeRounds(
      membership_.memberCount(),
      [this](const v1::RoundMessage& m, const std::vector<int>* to) { side().sendRound(m, to); },
      [this](const std::vector<int>& wake_fds, CrossClock::time_point until) {
        return endpoints_.idle(wake_fds, until);
      });
  // (An end after this finds rounds_ in abortRounds.)
  if (const std::string ended = membership_.ended(); !ended.empty()) {
    rounds_->abort("job '" + options_.job_id + "': " + ended);
  }
  return rounds_.get();
}

RoundExchange* CrossNode::leaderRounds() { return rounds(); }

bool CrossNode::waitFormed(CrossClock::time_point deadline) { return membership_.waitFormed(deadline); }

void CrossNode::abortRounds(const std::string& reason) {
  LeaderRounds* rounds;
  {
    MutexLock lock(rounds_mutex_);
    rounds = rounds_.get();
  }
  if (rounds != nullptr) rounds->abort(reason);
}

uint64_t CrossNode::cachedId(const coordinator::Request& request) const { return codec_.cachedId(request); }

std::optional<coordinator::Response> CrossNode::cachedResponse(uint64_t id) const { return codec_.cachedResponse(id); }

std::vector<v1::NodeInfo> CrossNode::members() const { return membership_.members(); }

std::vector<v1::NodeInfo> CrossNode::members(uint64_t* epoch) const { return membership_.members(epoch); }

int CrossNode::selfCrossRank() const { return membership_.crossRank(side()); }

void CrossNode::nodeLost(const v1::NodeInfo& node, uint64_t epoch, const std::string& cause) {
  Status majority = okStatus();
  if (options_.elastic && hooks_.on_ranks_lost) {
    {
      MutexLock lock(membership_.mutex());
      membership::EpochBook& book = membership_.bookLocked();
      // Leader with failover on: it makes no epoch without a majority (the
      // others may be electing a new leader), and the job fails on its side.
      majority = side().majority(node.peer_address(), CrossClock::now(), book.members().size());
      // Its joiners went with it: the new epoch must not admit them.
      if (majority.isOk()) book.dropJoinersOf(node.peer_address());
    }
    if (majority.isOk()) {
      hooks_.on_ranks_lost({node.ranks().begin(), node.ranks().end()}, epoch, cause);
      return;
    }
    GS_LOG(control, err, "job '{}': {}; {}", options_.job_id, cause, majority.message());
  }
  const std::string failure = majority.isOk() ? cause : cause + "; " + majority.message();
  failures_.detected(failure, true);
}

bool CrossNode::selfPaused(CrossClock::time_point now) {
  // The first tick counts as after a pause: this daemon may have been
  // stopped between joining and it, so the silence clocks start here.
  const bool paused =
      last_tick_ == CrossClock::time_point() || now - last_tick_ > std::chrono::milliseconds(kSilenceLimitMs / 2);
  last_tick_ = now;
  return paused;
}

void CrossNode::tick(CrossClock::time_point now) {
  const bool send = now - last_heartbeat_ >= kHeartbeatPeriod;
  if (send) last_heartbeat_ = now;
  const bool paused = selfPaused(now);
  side().tick(now, send, paused);
}

void CrossNode::describe(v1::JobInfo* info, CrossClock::time_point now, double busy_seconds) const {
  MutexLock lock(membership_.mutex());
  const membership::EpochBook& book = membership_.bookLocked();
  info->set_epoch(book.formed() ? book.epoch() : 0);
  const CoordinationCodec::Traffic traffic = codec_.traffic();
  info->set_coordination_bytes_sent(traffic.bytes_sent);
  info->set_coordination_bytes_received(traffic.bytes_received);
  info->set_coordination_messages(traffic.messages);
  info->set_cache_hits(traffic.cache_hits);
  info->set_largest_coordination_message(traffic.largest_message);
  if (!membership_.ncclIdLocked().empty()) info->set_nccl_id_digest(digest(membership_.ncclIdLocked()));
  const int64_t now_ms = NodeSide::nowMs(now);
  for (const auto& node : book.members()) {
    v1::NodeStatus* out = info->add_nodes();
    out->set_cross_rank(node.cross_rank());
    out->set_peer_address(node.peer_address());
    out->set_hostname(node.hostname());
    for (int r : node.ranks()) out->add_ranks(r);
    out->set_self(node.peer_address() == options_.self_address);
    out->set_leader(node.cross_rank() == 0);
    out->set_gpus(node.gpus());
    out->set_topology(node.topology());
    out->set_heartbeat_age_ms(out->self() ? 0 : side().heardAgeMs(node, now_ms));
    const transport::PeerStats stats = endpoints_.stats(node.ucx_address());
    out->set_bytes_sent(stats.bytes_sent);
    out->set_bytes_received(stats.bytes_received);
    out->set_failed_transfers(stats.failed_transfers);
    if (busy_seconds > 0) out->set_throughput_gbps((stats.bytes_sent + stats.bytes_received) / busy_seconds / 1e9);
  }
}

// Elastic jobs: what happens when a rank or a node of a job spanning
// daemons is lost and the job goes on.
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
uint64_t CrossNode::epoch() const { return membership_.epoch(); }

StatusOr<v1::NewEpoch> CrossNode::beginEpoch(const std::vector<int>& lost, uint64_t epoch, const std::string& cause) {
  return leader_side_->beginEpoch(lost, epoch, cause);
}

StatusOr<v1::NewEpoch> CrossNode::admitJoiners(const std::vector<uint64_t>& local, const std::string& when) {
  return leader_side_->admitJoiners(local, when);
}

bool CrossNode::hasPendingJoiners() const { return membership_.joinersWaiting(); }

void CrossNode::applyNewEpoch(const v1::NewEpoch& change) {
  std::string removed;
  {
    MutexLock lock(membership_.mutex());
    switch (membership_.bookLocked().apply(change)) {
      case membership::EpochBook::Applied::kStale:
        return;
      case membership::EpochBook::Applied::kRemoved:
        failures_.notices().removed();
        removed = "this node was removed from job '" + options_.job_id + "' at epoch " +
                  std::to_string(change.epoch()) + " (" + change.cause() + ")";
        break;
      case membership::EpochBook::Applied::kApplied:
        codec_.clear();  // as the leader did before it sent the change
        membership_.setNcclIdLocked(change.nccl_unique_id());
        membership_.endOldEpochTransfersLocked();
        break;
    }
  }
  membership_.notifyChanged();
  if (!removed.empty()) {
    failures_.detected(removed, true);
    return;
  }
  if (hooks_.on_new_epoch) hooks_.on_new_epoch(change);
}

StatusOr<v1::CheckMemberResponse> CrossNode::checkMember(const v1::CheckMemberRequest& request) const {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  return membership_.check(request.peer_address());
}

bool CrossNode::electing() const { return election_.electing(epoch()); }

}  // namespace gradsync::peer
