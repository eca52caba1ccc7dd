// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_followers.h"

#include "daemon/common/logging.h"

namespace gradsync::peer {

CrossNode::LeaderSide::Followers::Followers(CrossNode* node, FollowerStreams& streams)
    : node_(node), options_(node->options_), members_(node->membership_), streams_(streams) {}

class CrossNode::LeaderSide::Followers::Served : public FollowerSession {
 public:
  Served(Followers* side, std::shared_ptr<Follower> follower) : side_(side), follower_(std::move(follower)) {}
  grpc::Status onMessage(const v1::FollowerMessage& message) override {
    return side_->message(follower_.get(), message);
  }
  void onEnd(bool cut_off, const std::string& why) override {
    follower_->stream.detach();
    side_->left(follower_, cut_off, why);
  }

 private:
  Followers* const side_;
  const std::shared_ptr<Follower> follower_;
};

grpc::Status CrossNode::LeaderSide::Followers::serve(const v1::FollowerMessage& hello,
                                                     std::shared_ptr<FollowerStream> stream,
                                                     std::unique_ptr<FollowerSession>* session) {
  std::shared_ptr<Follower> follower;
  std::optional<SharedMessage> failure;
  if (grpc::Status attached = attach(hello, std::move(stream), &follower, &failure); !attached.ok()) {
    return attached;
  }
  if (failure) follower->stream.send(*failure);  // announced before it attached
  members_.notifyChanged();                      // broadcast() waits for every follower
  *session = std::make_unique<Served>(this, std::move(follower));
  return grpc::Status::OK;
}

grpc::Status CrossNode::LeaderSide::Followers::message(Follower* follower, const v1::FollowerMessage& message) {
  follower->heardAt(nowMs(CrossClock::now()));
  node_->codec_.countReceived(message.ByteSizeLong());
  // A message from a node the job removed: answered that it is stale.
  if (const std::string why = follower->removed(); !why.empty()) {
    tellRemoved(follower, why);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why);
  }
  dispatch(follower, message);
  return grpc::Status::OK;
}

grpc::Status CrossNode::LeaderSide::Followers::attach(const v1::FollowerMessage& hello,
                                                      std::shared_ptr<FollowerStream> stream,
                                                      std::shared_ptr<Follower>* attached,
                                                      std::optional<SharedMessage>* failure) {
  MutexLock lock(members_.mutex());
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
    if (cross_rank > 0 && cross_rank < static_cast<int>(members_.bookLocked().members().size())) {
      follower = streams_.attachMember(members_.bookLocked().members()[cross_rank], std::move(stream), now_ms, failure);
    }
    if (!follower) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad cross rank");
  }
  *attached = std::move(follower);
  return grpc::Status::OK;
}

void CrossNode::LeaderSide::Followers::dispatch(Follower* follower, const v1::FollowerMessage& message) {
  if (message.has_rank_lost()) {
    if (node_->hooks_.on_ranks_lost) {
      node_->hooks_.on_ranks_lost({message.rank_lost().rank()}, message.rank_lost().epoch(),
                                  message.rank_lost().cause());
    }
  } else if (message.has_joiner_ready() || message.has_joiner_gone()) {
    joinerReport(follower, message);
  } else if (message.has_request()) {
    const v1::FollowerMessage::Request* one = &message.request();
    passToJob(&one, 1);
  } else if (message.has_requests()) {
    passToJob(message.requests().requests().data(), message.requests().requests_size());
  } else if (message.has_round()) {
    if (LeaderRounds* rounds = node_->rounds(); rounds != nullptr) {
      rounds->deliver(message.round(), follower->crossRank());
    }
  } else if (message.has_failure()) {
    node_->failures_.heard(message.failure(), membership::describeNode(follower->node()), follower);
  }
}

bool CrossNode::LeaderSide::Followers::passToJob(const v1::FollowerMessage::Request* const* requests, int count) {
  const uint64_t current = members_.epoch();
  std::vector<coordinator::Repeat> run;  // by cache id, of `run_epoch`
  uint64_t run_epoch = 0;
  const auto hand_over = [&] {
    if (!run.empty()) node_->hooks_.on_remote_repeats(std::move(run), run_epoch);
    run.clear();
  };
  for (int i = 0; i < count; ++i) {
    const v1::FollowerMessage::Request& request = *requests[i];
    // Of an epoch that ended: dropped (the follower fails it when it learns
    // of the new one).
    if (request.epoch() != 0 && request.epoch() != current) continue;
    if (request.cache_id() == 0 || request.epoch() != run_epoch) hand_over();
    if (request.cache_id() == 0) {
      auto enqueue = node_->codec_.expand(request);
      if (!enqueue.isOk()) {
        node_->failures_.detected(enqueue.status().message(), true);
        return false;
      }
      node_->hooks_.on_remote_request(request.rank(), *enqueue, request.epoch());
      continue;
    }
    auto repeat = node_->codec_.expandRepeat(request);
    if (!repeat.isOk()) {
      hand_over();
      node_->failures_.detected(repeat.status().message(), true);
      return false;
    }
    run_epoch = request.epoch();
    run.push_back(std::move(repeat).value());
  }
  hand_over();
  return true;
}

void CrossNode::LeaderSide::Followers::left(const std::shared_ptr<Follower>& follower, bool cut_off,
                                            const std::string& why) {
  bool stopping;
  v1::NodeInfo node;
  uint64_t epoch;
  {
    MutexLock lock(members_.mutex());
    stopping = members_.stoppingLocked() || !follower->removed().empty();  // a removed node's departure changes nothing
    node = follower->node();
    epoch = members_.bookLocked().epoch();
  }
  if (node.ranks().empty()) {  // a candidate: nothing of the job ran there
    candidateLeft(follower);
    return;
  }
  if (stopping) return;
  if (!why.empty()) {
    node_->nodeLost(node, epoch, "cut off " + membership::describeNode(node) + ": it fell behind the leader: " + why);
  } else if (cut_off) {
    node_->nodeLost(node, epoch, "lost " + membership::describeNode(node) + ": the daemon died or was cut off");
  } else {
    // A clean close: the node's ranks all finished. Only collectives that
    // would still need them fail.
    node_->failures_.detected(membership::describeNode(node) + " left the job (its ranks finished)", false);
  }
}

void CrossNode::LeaderSide::Followers::joinerReport(Follower* follower, const v1::FollowerMessage& message) {
  MutexLock lock(members_.mutex());
  if (!options_.elastic) return;
  const std::string& address = follower->peerAddress();
  if (message.has_joiner_gone()) {
    members_.bookLocked().removeJoiner(address, message.joiner_gone().joiner_id());
    return;
  }
  members_.bookLocked().addJoiner({address, message.joiner_ready().joiner_id(), message.joiner_ready().pid()});
  GS_LOG(control, info, "job '{}': {} waits on node {} to join at the next commit ({} waiting across nodes)",
         options_.job_id, message.joiner_ready().description(), address, members_.bookLocked().joinerCount());
}

void CrossNode::LeaderSide::Followers::candidateLeft(const std::shared_ptr<Follower>& candidate) {
  MutexLock lock(members_.mutex());
  const std::string& address = candidate->peerAddress();
  if (!streams_.dropCandidate(candidate.get())) return;
  members_.bookLocked().dropCandidate(address);
  GS_LOG(control, info, "job '{}': candidate node {} left before its ranks were admitted", options_.job_id, address);
}

void CrossNode::LeaderSide::Followers::tellRemoved(Follower* follower, const std::string& why) {
  v1::LeaderMessage notice;
  notice.mutable_failure()->set_message(why);
  notice.mutable_failure()->set_node_lost(true);
  notice.mutable_failure()->set_removed(true);
  follower->stream.send(std::move(notice));
}

}  // namespace gradsync::peer
