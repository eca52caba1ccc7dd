// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/follower_side.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "daemon/common/logging.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/membership_parts.h"

namespace gradsync::peer {
namespace {

constexpr auto kLeaveLimit = std::chrono::seconds(2);  // a graceful close seen by the reader
constexpr auto kAskRetryDelay = std::chrono::milliseconds(50);
constexpr int kRefusalsToGiveUp = 4;

}  // namespace

FollowerSide::FollowerSide(CrossNodeOptions options, CoordinationCodec* codec, FailureNotices* notices, Host* host)
    : options_(std::move(options)),
      codec_(codec),
      notices_(notices),
      host_(host),
      join_({options_.job_id, options_.token, options_.leader_address, options_.self_address, options_.join_timeout,
             options_.protocol}),
      link_(options_.credentials, [codec](size_t bytes) { codec->countSent(bytes); }) {}

FollowerSide::~FollowerSide() { leave(); }

void FollowerSide::start(v1::NodeInfo self) {
  reader_ = std::thread([this, self = std::move(self)] {
    Status joined = joinLeader(self);
    if (joined.isOk()) {
      readLeader();
    } else {
      host_->failureDetected(joined.message(), true);
    }
    readerDone();
  });
}

void FollowerSide::readerDone() {
  MutexLock lock(mutex_);
  reader_done_ = true;
  reader_done_cv_.notify_all();
}

void FollowerSide::leave() {
  {
    MutexLock lock(mutex_);
    if (leaving_) return;
    leaving_ = true;
  }
  // Leave gracefully: the leader then knows this node's ranks finished
  // (and other nodes keep running what was already negotiated).
  link_.writesDone();
  {
    MutexLock lock(mutex_);
    reader_done_cv_.wait_for(lock, kLeaveLimit,
                             [&]() GS_REQUIRES(mutex_) { return reader_done_ || !reader_.joinable(); });
    if (!reader_done_) link_.cancel();
  }
  if (reader_.joinable()) reader_.join();
  std::shared_ptr<AbortNotices> notices;
  {
    MutexLock lock(mutex_);
    notices = abort_notices_;
  }
  if (notices) notices->wait();
}

Status FollowerSide::joinLeader(const v1::NodeInfo& self) {
  if (options_.leader_address.empty()) {
    return failedPrecondition("job '" + options_.job_id +
                              "' spans nodes but its ranks gave no leader address "
                              "(GRADSYNC_LEADER)");
  }
  link_.connect(options_.leader_address);
  ASSIGN_OR_RETURN(const v1::JoinJobResponse joined,
                   join_.join(link_.channel(), link_.stub().get(), joinRequest(self)));
  host_->joined(joined);
  openStream();
  if (self.ranks().empty()) {
    GS_LOG(control, info,
           "job '{}': joined the running job (epoch {}) at {} as a candidate node: its new ranks wait "
           "for the next commit",
           options_.job_id, host_->epoch(), options_.leader_address);
  } else {
    GS_LOG(control, info, "job '{}': joined the leader at {} as node {}", options_.job_id, options_.leader_address,
           host_->selfCrossRank());
  }
  return okStatus();
}

v1::JoinJobRequest FollowerSide::joinRequest(const v1::NodeInfo& self) const {
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

void FollowerSide::openStream() {
  v1::FollowerMessage hello;
  hello.mutable_hello()->set_job_id(options_.job_id);
  hello.mutable_hello()->set_token(options_.token);
  hello.mutable_hello()->set_cross_rank(host_->selfCrossRank());
  hello.mutable_hello()->set_peer_address(options_.self_address);
  options_.protocol.stamp(hello.mutable_hello());
  link_.open(hello);
}

void FollowerSide::readLeader() {
  for (;;) {
    // Once the stream ends, writes wait in the link: after a failover the
    // new leader's stream sends them.
    const grpc::Status status = link_.read([this](const v1::LeaderMessage& m) { onLeaderMessage(m); });
    batch_parts_.reset();  // a batch cut short with its stream
    if (host_->stopping()) return;
    // An elastic job's leader may have removed this node (it was paused,
    // say): then this node is what was lost, and it says so.
    const std::string removed = status.ok() ? "" : askIfRemoved();
    if (removed.empty() && !status.ok() && options_.failover) {
      auto leading = host_->elect("lost the leader " + leaderDescription() + ": " + status.error_message());
      if (!leading.isOk()) {
        host_->leaderLost(leading.status().message());
        return;
      }
      if (*leading) return;  // this daemon leads now: no leader stream to read
      continue;              // following the new leader
    }
    if (!removed.empty()) {
      notices_->removed();
      host_->failureDetected(removed, true);
    } else if (status.ok()) {
      host_->failureDetected("the leader " + leaderDescription() + " closed the job (its ranks finished)", false);
    } else {
      host_->leaderLost("lost the leader " + leaderDescription() + ": " + status.error_message());
    }
    return;
  }
}

Status FollowerSide::follow(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel,
                            v1::ElectResponse answer) {
  v1::NewEpoch& change = *answer.mutable_change();
  if (change.node_count() > 0) {
    RETURN_IF_ERROR(readRestOfMembers(v1::Peer::NewStub(channel).get(), options_.job_id, options_.token, change.epoch(),
                                      change.node_count(), change.mutable_nodes()));
  }
  host_->newEpoch(change);
  link_.connect(leader.peer_address());  // CheckMember asks the new leader too
  openStream();
  leader_changes_.fetch_add(1);
  GS_LOG(control, warn, "job '{}': follows the new leader {} at epoch {}", options_.job_id,
         membership::describeNode(leader), change.epoch());
  return okStatus();
}

std::string FollowerSide::leaderDescription() const {
  uint64_t epoch;
  for (const auto& node : host_->members(&epoch)) {
    if (node.cross_rank() == 0) return membership::describeNode(node);
  }
  return options_.leader_address;
}

void FollowerSide::onLeaderMessage(const v1::LeaderMessage& message) {
  codec_->countReceived(message.ByteSizeLong());
  if (message.has_round()) {
    host_->round(message.round());
  } else if (message.has_batch()) {
    onBatchPart(message.batch());
  } else if (message.has_failure()) {
    if (message.failure().removed()) notices_->removed();
    host_->heardFailure(message.failure(), "the leader " + leaderDescription());
  } else if (message.has_new_epoch() && message.new_epoch().node_count() == 0) {
    host_->newEpoch(message.new_epoch());
  } else if (message.has_new_epoch()) {
    v1::NewEpoch change = message.new_epoch();
    const Status read = readRestOfMembers(link_.stub().get(), options_.job_id, options_.token, change.epoch(),
                                          change.node_count(), change.mutable_nodes());
    if (!read.isOk()) {
      host_->leaderLost(read.message());
      return;
    }
    host_->newEpoch(change);
  }
}

void FollowerSide::onBatchPart(const v1::Batch& part) {
  auto assembled = batch_parts_.add(part);
  if (!assembled.isOk()) {
    host_->failureDetected("job '" + options_.job_id + "': " + assembled.status().message(), true);
    return;
  }
  if (!assembled->has_value()) return;  // more parts follow
  const v1::Batch& whole = **assembled;
  std::vector<coordinator::Response> batch;
  for (const auto& r : whole.responses()) {
    auto response = codec_->decode(r);
    if (!response.isOk()) {
      host_->failureDetected(response.status().message(), true);
      break;
    }
    batch.push_back(std::move(response).value());
  }
  host_->batch(std::move(batch), whole.sequence(), whole.epoch(), whole.fusion_threshold_bytes());
}

void FollowerSide::forward(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
  v1::FollowerMessage message;
  *message.mutable_request() = codec_->compact(rank, enqueue, epoch);
  link_.write(std::move(message));
}

void FollowerSide::reportRankLost(int rank, uint64_t epoch, const std::string& cause) {
  v1::FollowerMessage message;
  message.mutable_rank_lost()->set_rank(rank);
  message.mutable_rank_lost()->set_epoch(epoch);
  message.mutable_rank_lost()->set_cause(cause);
  link_.write(std::move(message));
}

void FollowerSide::reportJoiner(uint64_t id, int64_t pid, const std::string& description) {
  v1::FollowerMessage message;
  message.mutable_joiner_ready()->set_joiner_id(id);
  message.mutable_joiner_ready()->set_pid(pid);
  message.mutable_joiner_ready()->set_description(description);
  link_.write(std::move(message));
}

void FollowerSide::reportJoinerGone(uint64_t id) {
  v1::FollowerMessage message;
  message.mutable_joiner_gone()->set_joiner_id(id);
  link_.write(std::move(message));
}

std::string FollowerSide::askIfRemoved() {
  if (!options_.elastic || link_.channel() == nullptr) return "";
  v1::CheckMemberRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  request.set_peer_address(options_.self_address);
  // A channel of its own: the stream's channel may be what broke (this
  // daemon was paused and its keepalive watchdog fired), and a call on a
  // connection that is going down fails with the same transport error.
  // The question is asked again until the deadline, or until the leader's
  // address refused the connection kRefusalsToGiveUp times in a row (its
  // daemon is gone: nothing listens there).
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(
      link_.address(), options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials()));
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  v1::CheckMemberResponse response;
  grpc::Status status;
  for (int refused = 0;;) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    status = stub->CheckMember(&context, request, &response);  // fails fast when it cannot connect
    refused = status.error_code() == grpc::StatusCode::UNAVAILABLE ? refused + 1 : 0;
    if (status.ok() || refused >= kRefusalsToGiveUp || std::chrono::system_clock::now() + kAskRetryDelay >= deadline) {
      break;
    }
    std::this_thread::sleep_for(kAskRetryDelay);
  }
  if (!status.ok()) {
    GS_LOG(control, warn, "job '{}': could not ask the leader {} whether this node is still a member: {}",
           options_.job_id, link_.address(), status.error_message());
    return "";
  }
  if (response.member()) return "";
  return response.removed().empty()
             ? "this node is no longer in job '" + options_.job_id + "' (the leader is at epoch " +
                   std::to_string(response.epoch()) + "): refused as stale"
             : response.removed();
}

void FollowerSide::tick(CrossClock::time_point now, bool send, bool paused) {
  if (!link_.isOpen()) return;
  const int64_t now_ms = nowMs(now);
  if (send) {
    v1::FollowerMessage beat;
    beat.mutable_heartbeat()->set_sent_ms(now_ms);
    beat.mutable_heartbeat()->set_epoch(host_->epoch());
    link_.write(std::move(beat));
  }
  if (paused) link_.heardAt(now_ms);  // the leader's silence was this daemon's pause
  const int64_t heard = link_.heardMs();
  if (heard <= 0 || now_ms - heard <= kSilenceLimitMs) return;
  if (options_.failover) {
    // The reader sees its stream end and starts the failover.
    link_.cancel();
  } else {
    host_->leaderLost("lost the leader at " + options_.leader_address + ": silent for " +
                      std::to_string((now_ms - heard) / 1000) + " s");
  }
}

void FollowerSide::tell(const std::string& text, bool node_lost, const Follower*, FailureNotices::Route route) {
  v1::FollowerMessage message;
  message.mutable_failure()->set_message(text);
  message.mutable_failure()->set_node_lost(node_lost);
  // The leader tells the others before this node's ranks hear of it (they
  // may exit, and a node that closes cleanly before the leader knows would
  // become the job's cause there); only a lost leader is told around.
  if (route == FailureNotices::Route::kAroundTheLeader) tellOtherFollowers(message.failure());
  link_.write(std::move(message));
}

void FollowerSide::heard(const v1::JobFailure& failure, const Follower*) { notices_->heard(failure.node_lost()); }

void FollowerSide::relayAbort(const v1::JobFailure& failure) {
  if (failure.node_lost()) tellOtherFollowers(failure);
}

void FollowerSide::sendRound(const v1::RoundMessage& message, const std::vector<int>*) {
  v1::FollowerMessage part;
  *part.mutable_round() = message;
  link_.write(std::move(part));
}

int64_t FollowerSide::heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const {
  const int64_t heard = link_.heardMs();
  return node.cross_rank() == 0 && heard > 0 ? now_ms - heard : -1;
}

void FollowerSide::tellOtherFollowers(const v1::JobFailure& failure) {
  if (host_->stopping()) return;
  v1::AbortJobRequest request;
  request.set_job_id(options_.job_id);
  request.set_token(options_.token);
  *request.mutable_failure() = failure;
  request.set_from_peer_address(options_.self_address);
  uint64_t epoch;
  // In cross-rank order; the leader (cross rank 0) is not told.
  const std::vector<v1::NodeInfo> members = host_->members(&epoch);
  request.set_epoch(epoch);
  const size_t followers = members.empty() ? 0 : members.size() - 1;
  size_t self = followers;
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i].peer_address() == options_.self_address) self = i - 1;
  }
  if (self == followers) return;  // not a follower of this membership
  std::vector<std::string> addresses;
  for (size_t relay : AbortNotices::relaysOf(self, followers)) addresses.push_back(members[relay + 1].peer_address());
  MutexLock lock(mutex_);
  if (abort_notices_ || leaving_) return;
  // Asynchronous: the calls start here and answer on gRPC's threads.
  abort_notices_ = AbortNotices::send(std::move(request), addresses, options_.credentials);
}

}  // namespace gradsync::peer
