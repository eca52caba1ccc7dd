// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/cross_node.h"

#include <algorithm>
#include <cstdio>

#include "daemon/common/logging.h"
#include "daemon/common/siphash.h"
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

// What the leader election asks of this node, answered under mutex_.
class CrossNode::ElectionHost final : public LeaderElection::Host {
 public:
  explicit ElectionHost(CrossNode* node) : node_(node) {}
  uint64_t membership(std::vector<v1::NodeInfo>* members) const override {
    MutexLock lock(node_->mutex_);
    *members = node_->book_.members();
    return node_->book_.epoch();
  }
  bool isMember(const std::string& address) const override {
    MutexLock lock(node_->mutex_);
    return node_->book_.member(address) != nullptr;
  }
  bool leads() const override { return node_->side().leads(); }
  StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) override { return node_->takeOver(epoch); }
  Status followElected(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel,
                       v1::ElectResponse answer) override {
    return node_->follower_->follow(leader, channel, std::move(answer));
  }

 private:
  CrossNode* const node_;
};

// What the follower's side asks of this node: the membership under mutex_,
// the job's hooks, the election, the failure's way.
class CrossNode::FollowerHost final : public FollowerSide::Host {
 public:
  explicit FollowerHost(CrossNode* node) : node_(node) {}
  void joined(const v1::JoinJobResponse& response) override {
    {
      MutexLock lock(node_->mutex_);
      // A candidate joins a running job (at its epoch, not a member yet).
      node_->book_.form({response.nodes().begin(), response.nodes().end()}, std::max<uint64_t>(1, response.epoch()));
      node_->nccl_id_ = response.nccl_unique_id();
    }
    node_->formed_cv_.notify_all();
  }
  uint64_t epoch() const override { return node_->epoch(); }
  int selfCrossRank() const override { return node_->selfCrossRank(); }
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const override { return node_->members(epoch); }
  bool stopping() const override {
    MutexLock lock(node_->mutex_);
    return node_->stopping_;
  }
  void round(const v1::RoundMessage& message) override {
    LeaderRounds* rounds;
    {
      MutexLock lock(node_->mutex_);
      rounds = node_->roundsLocked();
    }
    if (rounds != nullptr) rounds->deliver(message, 0);
  }
  void batch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
             uint64_t fusion_threshold_bytes) override {
    node_->hooks_.on_batch(std::move(batch), sequence, epoch, fusion_threshold_bytes);
  }
  void newEpoch(const v1::NewEpoch& change) override { node_->applyNewEpoch(change); }
  StatusOr<bool> elect(const std::string& cause) override { return node_->election_.run(cause); }
  void failureDetected(std::string cause, bool node_lost) override {
    node_->failureDetected(std::move(cause), node_lost);
  }
  void heardFailure(const v1::JobFailure& failure, const std::string& from) override {
    node_->heardFailure(failure, from);
  }
  void leaderLost(std::string cause) override { node_->leaderLost(std::move(cause)); }

 private:
  CrossNode* const node_;
};

CrossNode::CrossNode(CrossNodeOptions options, Hooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      joins_(options_.job_id, options_.token, options_.size, options_.process_sets, options_.join_timeout),
      election_host_(std::make_unique<ElectionHost>(this)),
      election_({options_.job_id, options_.token, options_.self_address, options_.credentials, options_.failover,
                 options_.membership_part_bytes},
                election_host_.get()),
      book_(options_.job_id, options_.self_address, options_.min_size),
      published_(options_.membership_part_bytes),
      mesh_(options_.job_id, options_.token),
      codec_(options_.job_id, options_.response_cache_capacity),
      follower_host_(std::make_unique<FollowerHost>(this)),
      follower_(std::make_unique<FollowerSide>(options_, &codec_, &notices_, follower_host_.get())),
      leader_side_(std::make_unique<LeaderSide>(this)),
      side_(follower_.get()) {}

CrossNode::~CrossNode() {
  JoinDesk::Answers joins;
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    joins = dueJoinsLocked(CrossClock::now());
  }
  follower_->stopJoining();
  election_.stop();
  for (auto& [answer, result] : joins) answer(std::move(result));
  formed_cv_.notify_all();
  abortRounds("job '" + options_.job_id + "' stopped");
  // Before the data plane closes: the follower's AbortJob calls carry the cause.
  follower_->leave();
  // After the streams ended: the leader's job may wait for them to end
  // before it says goodbye too.
  if (goodbye_.load()) sayGoodbye();
  // mesh_, destroyed after this, drives what was sent until it left (the
  // executor thread has ended: this thread may drive the transport).
}

void CrossNode::sayGoodbye() {
  if (notices_.nodeLost()) {  // a node is gone: nobody waits for this one's bytes
    GS_LOG(control, debug, "job '{}': no goodbye (a node was lost)", options_.job_id);
    return;
  }
  mesh_.goodbye();
}

void CrossNode::start(const std::vector<int>& local_ranks, const std::vector<int64_t>& pids) {
  const bool leads = std::find(local_ranks.begin(), local_ranks.end(), 0) != local_ranks.end();
  side_ = leads ? static_cast<NodeSide*>(leader_side_.get()) : follower_.get();
  Status opened = mesh_.open(options_.data_plane);
  if (!opened.isOk()) {
    failureDetected("cannot start the UCX data plane: " + opened.message(), true);
    return;
  }
  v1::NodeInfo self;
  self.set_peer_address(options_.self_address);
  self.set_hostname(options_.hostname);
  self.set_topology(options_.topology);
  for (int r : local_ranks) self.add_ranks(r);
  for (int64_t p : pids) self.add_pids(p);
  self.set_ucx_address(mesh_.address());
  self.set_gpus(options_.gpus);
  self.set_nccl(options_.nccl);
  self.set_steady_state_rounds(options_.steady_state_rounds);
  self.set_link_cost(options_.link_cost);
  self.set_leader_rounds(options_.leader_rounds);
  if (leads) {
    joins_.open(self);
    GS_LOG(control, info, "job '{}': leading; waiting for the other nodes to join", options_.job_id);
    return;
  }
  follower_->start(std::move(self));
}

void CrossNode::makeNcclIdLocked() {
  // Only for a job that will use it: NCCL's bootstrap root (a thread and a
  // listening socket) waits until the communicator forms, which a job with
  // a GPU-less node never does. An elastic job gets one with each epoch.
  nccl_id_.clear();
  const bool every_node_nccl = std::all_of(book_.members().begin(), book_.members().end(),
                                           [](const v1::NodeInfo& node) { return node.gpus() > 0 && node.nccl(); });
  if (!options_.make_nccl_id || !every_node_nccl || book_.members().empty()) return;
  auto id = options_.make_nccl_id();
  if (!id.isOk()) {
    GS_LOG(control, warn, "job '{}': no NCCL id for the daemons' GPUs: {}", options_.job_id, id.status().message());
    return;
  }
  nccl_id_ = std::move(id).value();
}

void CrossNode::acceptJoin(const v1::JoinJobRequest& request, JoinAnswer plain_answer) {
  // Every answer says which protocol this leader speaks.
  const ProtocolRange mine = options_.protocol;
  JoinAnswer answer = [plain_answer = std::move(plain_answer), mine](StatusOr<v1::JoinJobResponse> response) {
    if (response.isOk()) mine.stamp(&*response);
    plain_answer(std::move(response));
  };
  std::optional<StatusOr<v1::JoinJobResponse>> now;
  JoinDesk::Answers due;
  bool candidate = false;
  Status protocol = okStatus();
  {
    MutexLock lock(mutex_);
    if (Status checked = joins_.check(request); !checked.isOk()) {
      now = checked;
    } else if (protocol =
                   checkProtocol(options_.job_id, options_.protocol, "the leader (" + options_.self_address + ")",
                                 ProtocolRange::of(request), membership::describeNode(request.node()));
               !protocol.isOk()) {
      now = protocol;
    } else if (request.elastic_join()) {
      candidate = true;
    } else {
      now = joinLocked(request);
      if (!now) joins_.wait(std::move(answer), CrossClock::now());
      due = dueJoinsLocked(CrossClock::now());
    }
  }
  if (candidate) {
    answer(acceptCandidate(request));
    return;
  }
  if (now) answer(std::move(*now));
  for (auto& [waiting, result] : due) waiting(std::move(result));
  // The job cannot form: it fails here at once too (its ranks are told).
  if (!protocol.isOk()) failureDetected(protocol.message(), true);
}

std::optional<StatusOr<v1::JoinJobResponse>> CrossNode::joinLocked(const v1::JoinJobRequest& request) {
  if (book_.epoch() > 1) {
    return failedPrecondition("job '" + options_.job_id + "' is at epoch " + std::to_string(book_.epoch()) + ": " +
                              membership::describeNode(request.node()) +
                              " joins a running job only for new ranks "
                              "(GRADSYNC_ELASTIC_JOIN)");
  }
  if (stopping_) return unavailable("job '" + options_.job_id + "' stopped");
  if (book_.formed()) return membershipLocked();
  ASSIGN_OR_RETURN(std::optional<std::vector<v1::NodeInfo>> complete, joins_.add(request.node()));
  if (complete) {
    book_.form(std::move(*complete), 1);
    makeNcclIdLocked();
    GS_LOG(control, info, "job '{}': all {} nodes joined", options_.job_id, book_.members().size());
    formed_cv_.notify_all();
    return membershipLocked();
  }
  return std::nullopt;
}

v1::JoinJobResponse CrossNode::membershipLocked() {
  v1::JoinJobResponse response;
  response.set_epoch(1);
  for (const auto& node : book_.members()) *response.add_nodes() = node;
  response.set_node_count(publishLocked(1, response.mutable_nodes()));
  response.set_nccl_unique_id(nccl_id_);
  return response;
}

int32_t CrossNode::publishLocked(uint64_t epoch, NodeList* nodes) {
  published_.publish(epoch, *nodes);
  return keepFirstPart(nodes, published_.partBytes());
}

StatusOr<v1::MembersResponse> CrossNode::membersPart(const v1::MembersRequest& request) const {
  if (!constantTimeEqual(request.token(), options_.token))
    return unauthenticated("job '" + options_.job_id + "': token does not match");
  MutexLock lock(mutex_);
  auto part = published_.part(request.epoch(), request.first());
  if (!part.isOk()) return Status(part.status().code(), "job '" + options_.job_id + "': " + part.status().message());
  return part;
}

JoinDesk::Answers CrossNode::dueJoinsLocked(CrossClock::time_point now) {
  if (!joins_.waiting()) return {};
  std::optional<v1::JoinJobResponse> membership;
  if (book_.formed()) membership = membershipLocked();  // built once for all of them
  return joins_.due(now, membership, stopping_);
}

class CrossNode::ServedFollower : public FollowerSession {
 public:
  ServedFollower(CrossNode* node, std::shared_ptr<Follower> follower) : node_(node), follower_(std::move(follower)) {}
  grpc::Status onMessage(const v1::FollowerMessage& message) override {
    return node_->followerMessage(follower_.get(), message);
  }
  void onEnd(bool cut_off, const std::string& why) override {
    follower_->stream.detach();
    node_->followerLeft(follower_, cut_off, why);
  }

 private:
  CrossNode* const node_;
  const std::shared_ptr<Follower> follower_;
};

grpc::Status CrossNode::serveFollower(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                                      std::unique_ptr<FollowerSession>* session) {
  std::shared_ptr<Follower> follower;
  std::optional<SharedMessage> failure;
  if (grpc::Status attached = attachFollower(hello, std::move(stream), &follower, &failure); !attached.ok()) {
    return attached;
  }
  if (failure) follower->stream.send(*failure);  // announced before it attached
  formed_cv_.notify_all();                       // broadcast() waits for every follower
  *session = std::make_unique<ServedFollower>(this, std::move(follower));
  return grpc::Status::OK;
}

grpc::Status CrossNode::followerMessage(Follower* follower, const v1::FollowerMessage& message) {
  follower->heardAt(nowMs(CrossClock::now()));
  codec_.countReceived(message.ByteSizeLong());
  if (refuseIfRemoved(follower)) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, follower->removed());
  onFollowerMessage(follower, message);
  return grpc::Status::OK;
}

grpc::Status CrossNode::attachFollower(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                                       std::shared_ptr<Follower>* attached, std::optional<SharedMessage>* failure) {
  MutexLock lock(mutex_);
  const int cross_rank = hello.hello().cross_rank();
  if (!constantTimeEqual(hello.hello().token(), options_.token))
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
  if (Status protocol = checkProtocol(options_.job_id, options_.protocol, "the leader (" + options_.self_address + ")",
                                      ProtocolRange::of(hello.hello()), "the node at " + hello.hello().peer_address());
      !protocol.isOk()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, protocol.message());
  }
  const int64_t now_ms = nowMs(CrossClock::now());
  std::shared_ptr<Follower> follower;
  if (cross_rank < 0) {
    follower = streams_.attachCandidate(hello.hello().peer_address(), std::move(stream), now_ms, failure);
    if (!follower) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "not a candidate node of the job");
  } else {
    if (cross_rank > 0 && cross_rank < static_cast<int>(book_.members().size())) {
      follower = streams_.attachMember(book_.members()[cross_rank], std::move(stream), now_ms, failure);
    }
    if (!follower) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad cross rank");
  }
  *attached = std::move(follower);
  return grpc::Status::OK;
}

void CrossNode::onFollowerMessage(Follower* follower, const v1::FollowerMessage& message) {
  if (message.has_rank_lost()) {
    if (hooks_.on_ranks_lost) {
      hooks_.on_ranks_lost({message.rank_lost().rank()}, message.rank_lost().epoch(), message.rank_lost().cause());
    }
  } else if (message.has_joiner_ready() || message.has_joiner_gone()) {
    joinerReport(follower, message);
  } else if (message.has_request()) {
    const v1::FollowerMessage::Request* one = &message.request();
    remoteRequests(&one, 1);
  } else if (message.has_requests()) {
    remoteRequests(message.requests().requests().data(), message.requests().requests_size());
  } else if (message.has_round()) {
    LeaderRounds* rounds;
    {
      MutexLock lock(mutex_);
      rounds = roundsLocked();
    }
    if (rounds != nullptr) rounds->deliver(message.round(), follower->crossRank());
  } else if (message.has_failure()) {
    heardFailure(message.failure(), membership::describeNode(follower->node()), follower);
  }
}

bool CrossNode::remoteRequests(const v1::FollowerMessage::Request* const* requests, int count) {
  const uint64_t current = epoch();
  std::vector<coordinator::Repeat> run;  // by cache id, of `run_epoch`
  uint64_t run_epoch = 0;
  const auto hand_over = [&] {
    if (!run.empty()) hooks_.on_remote_repeats(std::move(run), run_epoch);
    run.clear();
  };
  for (int i = 0; i < count; ++i) {
    const v1::FollowerMessage::Request& request = *requests[i];
    // Of an epoch that ended: dropped (the follower fails it when it learns
    // of the new one).
    if (request.epoch() != 0 && request.epoch() != current) continue;
    if (request.cache_id() == 0 || request.epoch() != run_epoch) hand_over();
    if (request.cache_id() == 0) {
      auto enqueue = codec_.expand(request);
      if (!enqueue.isOk()) {
        failureDetected(enqueue.status().message(), true);
        return false;
      }
      hooks_.on_remote_request(request.rank(), *enqueue, request.epoch());
      continue;
    }
    auto repeat = codec_.expandRepeat(request);
    if (!repeat.isOk()) {
      hand_over();
      failureDetected(repeat.status().message(), true);
      return false;
    }
    run_epoch = request.epoch();
    run.push_back(std::move(repeat).value());
  }
  hand_over();
  return true;
}

void CrossNode::followerLeft(const std::shared_ptr<Follower>& follower, bool cut_off, const std::string& why) {
  bool stopping;
  v1::NodeInfo node;
  uint64_t epoch;
  {
    MutexLock lock(mutex_);
    stopping = stopping_ || !follower->removed().empty();  // a removed node's departure changes nothing
    node = follower->node();
    epoch = book_.epoch();
  }
  if (node.ranks().empty()) {  // a candidate: nothing of the job ran there
    candidateLeft(follower);
    return;
  }
  if (stopping) return;
  if (!why.empty()) {
    nodeLost(node, epoch, "cut off " + membership::describeNode(node) + ": it fell behind the leader: " + why);
  } else if (cut_off) {
    nodeLost(node, epoch, "lost " + membership::describeNode(node) + ": the daemon died or was cut off");
  } else {
    // A clean close: the node's ranks all finished. Only collectives that
    // would still need them fail.
    failureDetected(membership::describeNode(node) + " left the job (its ranks finished)", false);
  }
}

std::string CrossNode::unattachedLocked() const {
  const auto seconds = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.join_timeout).count());
  if (!book_.formed()) return "the job did not form within " + seconds + " s";
  std::string missing;
  for (size_t i = 0; i < book_.members().size(); ++i) {
    const int cross_rank = static_cast<int>(i);
    if (cross_rank == book_.selfCrossRank() || streams_.hasMember(cross_rank)) continue;
    missing += (missing.empty() ? "" : ", ") + membership::describeNode(book_.members()[i]);
  }
  return "not every node opened its coordination stream within " + seconds + " s: " + missing +
         " joined but never opened it";
}

Status CrossNode::broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence, uint64_t epoch,
                            uint64_t fusion_threshold_bytes) {
  v1::LeaderMessage message;
  message.mutable_batch()->set_sequence(sequence);
  message.mutable_batch()->set_epoch(epoch);
  message.mutable_batch()->set_fusion_threshold_bytes(fusion_threshold_bytes);
  std::vector<std::shared_ptr<Follower>> followers;
  {
    // Every node must see every batch (a process set's ring still spans all
    // nodes), so wait until every follower's stream is attached: a batch of
    // ranks on some nodes can be ready before the others have connected.
    MutexLock lock(mutex_);
    const bool attached = formed_cv_.wait_for(lock, options_.join_timeout, [&]() GS_REQUIRES(mutex_) {
      return stopping_ || !transfers_aborted_.empty() ||
             (book_.formed() && streams_.memberCount() + 1 == book_.members().size());
    });
    if (stopping_) return cancelled("job stopped");
    if (!transfers_aborted_.empty()) return aborted("job '" + options_.job_id + "': " + transfers_aborted_);
    if (!attached) return deadlineExceeded("job '" + options_.job_id + "': " + unattachedLocked());
    followers = streams_.streams(/*candidates=*/false);
  }
  // Encoded once every follower is attached: all of them learn new cache ids.
  MutexLock order(order_mutex_);
  for (const auto& r : batch) *message.mutable_batch()->add_responses() = codec_.encode(r);
  std::vector<SharedMessage> parts;
  for (auto& part : splitBatch(std::move(*message.mutable_batch()))) {
    v1::LeaderMessage one;
    *one.mutable_batch() = std::move(part);
    parts.push_back(share(std::move(one)));
  }
  // Queued, never waited for: a follower that falls behind is cut.
  for (auto& f : followers) {
    for (const auto& part : parts) {
      f->stream.send(part);
      codec_.countSent(part.bytes);
    }
  }
  return okStatus();
}

void CrossNode::sendError(const coordinator::Request& request, const Status& status) {
  coordinator::Response response;
  response.name = request.name;
  response.type = request.type;
  response.ranks = {request.rank};
  response.requests.push_back(request);
  response.status = status;
  const std::shared_ptr<Follower> target = streams_.holdingRank(request.rank);
  if (!target) return;
  v1::LeaderMessage message;
  message.mutable_batch()->set_sequence(0);  // not executed: no ring
  message.mutable_batch()->set_epoch(epoch());
  *message.mutable_batch()->add_responses() = toProto(response);
  target->stream.send(std::move(message));
}

void CrossNode::failedHere(const std::string& cause, bool node_lost) { announceFailure(cause, node_lost); }

void CrossNode::jobStopped() { notices_.jobStopped(); }

std::string CrossNode::namedCause(const std::string& cause) const {
  const std::string job = "job '" + options_.job_id + "': ";
  return cause.rfind(job, 0) == 0 ? cause : job + cause;
}

void CrossNode::announceFailure(const std::string& text, bool node_lost, const Follower* teller,
                                FailureNotices::Route route) {
  switch (notices_.tell(node_lost, route)) {
    case FailureNotices::Verdict::kToldAlready:
      return;
    case FailureNotices::Verdict::kRemoved:
      GS_LOG(control, info, "job '{}': this node was removed from the job; its failure is not announced to the others",
             options_.job_id);
      return;
    case FailureNotices::Verdict::kTell:
      break;
  }
  side().tell(text, node_lost, teller, route);
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

void CrossNode::abortTransfers(const std::string& reason) {
  {
    MutexLock lock(mutex_);
    if (transfers_aborted_.empty()) transfers_aborted_ = reason;
    mesh_.abort(reason);
  }
  follower_->abortJoin(reason);
  formed_cv_.notify_all();
  abortRounds(reason);
}

bool CrossNode::formed() const {
  MutexLock lock(mutex_);
  return book_.formed();
}

bool CrossNode::steadyStateRounds() const {
  if (options_.elastic) return false;
  MutexLock lock(mutex_);
  return book_.formed() && std::all_of(book_.members().begin(), book_.members().end(),
                                       [](const v1::NodeInfo& node) { return node.steady_state_rounds(); });
}

bool CrossNode::leaderRoundsOnLocked() const {
  const auto& nodes = book_.members();
  const auto all = [&](bool (v1::NodeInfo::*offered)() const) {
    return std::all_of(nodes.begin(), nodes.end(), [&](const v1::NodeInfo& node) { return (node.*offered)(); });
  };
  return !options_.elastic && book_.formed() && !all(&v1::NodeInfo::steady_state_rounds) &&
         all(&v1::NodeInfo::leader_rounds);
}

LeaderRounds* CrossNode::roundsLocked() {
  if (!rounds_ && leaderRoundsOnLocked()) {
    rounds_ = side().makeRounds(
        book_.members().size(),
        [this](const v1::RoundMessage& m, const std::vector<int>* to) { side().sendRound(m, to); },
        [this](const std::vector<int>& wake_fds, CrossClock::time_point until) { return idle(wake_fds, until); });
    if (stopping_ || !transfers_aborted_.empty()) {
      rounds_->abort("job '" + options_.job_id + "': " + (stopping_ ? "stopped" : transfers_aborted_));
    }
  }
  return rounds_.get();
}

RoundExchange* CrossNode::leaderRounds() {
  MutexLock lock(mutex_);
  return roundsLocked();
}

bool CrossNode::waitFormed(CrossClock::time_point deadline) {
  MutexLock lock(mutex_);
  formed_cv_.wait_until(
      lock, deadline, [&]() GS_REQUIRES(mutex_) { return book_.formed() || stopping_ || !transfers_aborted_.empty(); });
  return book_.formed() && !stopping_ && transfers_aborted_.empty();
}

void CrossNode::abortRounds(const std::string& reason) {
  LeaderRounds* rounds;
  {
    MutexLock lock(mutex_);
    rounds = rounds_.get();
  }
  if (rounds != nullptr) rounds->abort(reason);
}

uint64_t CrossNode::cachedId(const coordinator::Request& request) const { return codec_.cachedId(request); }

std::optional<coordinator::Response> CrossNode::cachedResponse(uint64_t id) const { return codec_.cachedResponse(id); }

std::vector<int> CrossNode::missingRanks() const {
  MutexLock lock(mutex_);
  if (book_.formed()) return {};
  return joins_.missingRanks();
}

std::vector<v1::NodeInfo> CrossNode::members() const {
  MutexLock lock(mutex_);
  return book_.members();
}

std::vector<v1::NodeInfo> CrossNode::members(uint64_t* epoch) const {
  MutexLock lock(mutex_);
  *epoch = book_.epoch();
  return book_.members();
}

NodeEndpoints::NcclId CrossNode::ncclId() const {
  MutexLock lock(mutex_);
  return {nccl_id_, book_.epoch(), side().crossRank(book_)};
}

Status CrossNode::epochRuns(uint64_t epoch) const {
  MutexLock lock(mutex_);
  return epochRunsLocked(epoch);
}

Status CrossNode::epochRunsLocked(uint64_t epoch) const {
  if (stopping_) return cancelled("job '" + options_.job_id + "' stopped");
  if (!transfers_aborted_.empty()) return aborted("job '" + options_.job_id + "': " + transfers_aborted_);
  if (epoch != book_.epoch()) {
    return aborted("job '" + options_.job_id + "': the membership changed (epoch " + std::to_string(epoch) +
                   " is over, the job is at epoch " + std::to_string(book_.epoch()) + ")");
  }
  return okStatus();
}

int CrossNode::selfCrossRank() const {
  MutexLock lock(mutex_);
  return side().crossRank(book_);
}

void CrossNode::nodeLost(const v1::NodeInfo& node, uint64_t epoch, const std::string& cause) {
  Status majority = okStatus();
  if (options_.elastic && hooks_.on_ranks_lost) {
    {
      MutexLock lock(mutex_);
      majority = majorityLocked(node.peer_address(), CrossClock::now());
      // Its joiners went with it: the new epoch must not admit them.
      if (majority.isOk()) book_.dropJoinersOf(node.peer_address());
    }
    if (majority.isOk()) {
      hooks_.on_ranks_lost({node.ranks().begin(), node.ranks().end()}, epoch, cause);
      return;
    }
    GS_LOG(control, err, "job '{}': {}; {}", options_.job_id, cause, majority.message());
  }
  const std::string failure = majority.isOk() ? cause : cause + "; " + majority.message();
  failureDetected(failure, true);
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
  MutexLock lock(mutex_);
  info->set_epoch(book_.formed() ? book_.epoch() : 0);
  const CoordinationCodec::Traffic traffic = codec_.traffic();
  info->set_coordination_bytes_sent(traffic.bytes_sent);
  info->set_coordination_bytes_received(traffic.bytes_received);
  info->set_coordination_messages(traffic.messages);
  info->set_cache_hits(traffic.cache_hits);
  info->set_largest_coordination_message(traffic.largest_message);
  if (!nccl_id_.empty()) info->set_nccl_id_digest(digest(nccl_id_));
  const int64_t now_ms = nowMs(now);
  for (const auto& node : book_.members()) {
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
    const transport::PeerStats stats = mesh_.stats(node.ucx_address());
    out->set_bytes_sent(stats.bytes_sent);
    out->set_bytes_received(stats.bytes_received);
    out->set_failed_transfers(stats.failed_transfers);
    if (busy_seconds > 0) out->set_throughput_gbps((stats.bytes_sent + stats.bytes_received) / busy_seconds / 1e9);
  }
}

Status CrossNode::dataPlane(CrossClock::time_point deadline, uint64_t epoch, std::vector<v1::NodeInfo>* members,
                            int* self) {
  bool new_epoch = false;
  {
    MutexLock lock(mutex_);
    if (!formed_cv_.wait_until(
            lock, deadline,
            [&]() GS_REQUIRES(mutex_) { return book_.formed() || stopping_ || !transfers_aborted_.empty(); }) ||
        stopping_) {
      return deadlineExceeded("job '" + options_.job_id + "': the nodes never formed a ring");
    }
    RETURN_IF_ERROR(epochRunsLocked(epoch));
    // Checked and lifted under one lock: an interruption for a later epoch
    // comes after this and ends this collective's waits.
    new_epoch = mesh_.enterEpoch(book_.epoch());
    *members = book_.members();
    *self = -1;
    for (const auto& node : book_.members()) {
      if (node.peer_address() == options_.self_address) *self = node.cross_rank();
    }
  }
  if (*self < 0) return internalError("this daemon is not in its job's membership");
  if (new_epoch) {
    const size_t closed = mesh_.rekey(epoch, *members);
    if (closed > 0 || epoch > 1) {
      GS_LOG(control, info, "job '{}': the ring re-forms for epoch {} ({} nodes)", options_.job_id, epoch,
             members->size());
    }
  }
  return okStatus();
}

namespace {
// The members at `nodes` (empty: all), in order, and this node's place among
// them (-1: not one of them). Positions outside the membership are dropped.
void selectNodes(const std::vector<int>& nodes, std::vector<v1::NodeInfo>* members, int* self) {
  if (nodes.empty()) return;
  std::vector<v1::NodeInfo> selected;
  int place = -1;
  for (int node : nodes) {
    if (node < 0 || node >= static_cast<int>(members->size())) continue;
    if (node == *self) place = static_cast<int>(selected.size());
    selected.push_back((*members)[node]);
  }
  *members = std::move(selected);
  *self = place;
}
}  // namespace

StatusOr<std::optional<collective::RingContext>> CrossNode::ring(const collective::TransferId& id,
                                                                 CrossClock::time_point deadline, uint64_t epoch,
                                                                 const std::vector<int>& nodes) {
  std::vector<v1::NodeInfo> members;
  int self = -1;
  RETURN_IF_ERROR(dataPlane(deadline, epoch, &members, &self));
  selectNodes(nodes, &members, &self);
  if (self < 0) return std::optional<collective::RingContext>();
  ASSIGN_OR_RETURN(auto ring, mesh_.ring(id, deadline, members, self));
  GS_LOG(executor, debug,
         "job '{}': ring of batch {} response {} call {} in epoch {}: node {} of {}, after {}, before {}",
         options_.job_id, id.batch, id.response, id.call, epoch, self, members.size(), ring.left->name(),
         ring.right->name());
  return std::optional<collective::RingContext>(std::move(ring));
}

StatusOr<std::optional<collective::MeshContext>> CrossNode::mesh(const collective::TransferId& id,
                                                                 CrossClock::time_point deadline, uint64_t epoch,
                                                                 const std::vector<int>& nodes) {
  std::vector<v1::NodeInfo> members;
  int self = -1;
  RETURN_IF_ERROR(dataPlane(deadline, epoch, &members, &self));
  selectNodes(nodes, &members, &self);
  if (self < 0) return std::optional<collective::MeshContext>();
  ASSIGN_OR_RETURN(auto mesh, mesh_.mesh(id, deadline, members, self));
  return std::optional<collective::MeshContext>(std::move(mesh));
}

}  // namespace gradsync::peer
