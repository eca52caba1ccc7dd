// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_side.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::peer {

void CrossNode::LeaderSide::tick(CrossClock::time_point now, bool send, bool paused) {
  const int64_t now_ms = nowMs(now);
  JoinDesk::Answers joins;  // past their deadline
  {
    MutexLock lock(node_->mutex_);
    joins = node_->dueJoinsLocked(now);
  }
  for (auto& [answer, result] : joins) answer(std::move(result));
  FollowerStreams& streams = node_->streams_;
  if (paused) streams.resumedAt(now_ms);  // the followers' silence so far was this daemon's pause
  uint64_t current_epoch;
  std::vector<std::pair<std::shared_ptr<Follower>, v1::NodeInfo>> followers;
  std::vector<v1::NodeInfo> absent;  // members that never followed this daemon since it took over
  {
    MutexLock lock(node_->mutex_);
    if (node_->stopping_) return;
    current_epoch = node_->book_.epoch();
    for (auto& f : streams.streams(/*candidates=*/true)) followers.emplace_back(f, f->node());
    absent = streams.absentSinceTakeover(node_->book_.members(), now_ms, kSilenceLimitMs);
  }
  for (const auto& node : absent) {
    node_->nodeLost(node, current_epoch,
                    "lost " + membership::describeNode(node) + ": it did not follow the new leader within " +
                        std::to_string(kSilenceLimitMs / 1000) + " s");
  }
  v1::LeaderMessage beat;
  beat.mutable_heartbeat()->set_sent_ms(now_ms);
  beat.mutable_heartbeat()->set_epoch(current_epoch);
  const SharedMessage shared_beat = share(std::move(beat));
  for (auto& [f, node] : followers) {
    if (!(send ? f->stream.send(shared_beat) : f->stream.attached())) continue;
    const int64_t heard_ms = f->lastHeardMs();
    const int64_t silent_ms = streams.silentMs(*f, now_ms);
    // A candidate holds nothing of the job yet: its stream's end is enough.
    if (!node.ranks().empty() && silent_ms > kSilenceLimitMs) {
      node_->nodeLost(node, current_epoch,
                      "lost " + membership::describeNode(node) + ": silent for " +
                          std::to_string((now_ms - heard_ms) / 1000) + " s");
    }
  }
}

void CrossNode::LeaderSide::tell(const std::string& text, bool node_lost, const Follower* teller,
                                 FailureNotices::Route) {
  v1::LeaderMessage message;
  message.mutable_failure()->set_message(text);
  message.mutable_failure()->set_node_lost(node_lost);
  node_->streams_.tellEveryone(share(std::move(message)), teller);
}

void CrossNode::LeaderSide::heard(const v1::JobFailure& failure, const Follower* teller) {
  if (node_->notices_.jobRunning()) {
    node_->announceFailure(node_->namedCause(failure.message()), failure.node_lost(), teller);
  }
}

void CrossNode::LeaderSide::sendRound(const v1::RoundMessage& message, const std::vector<int>* to) {
  v1::LeaderMessage out;
  *out.mutable_round() = message;
  const SharedMessage shared = share(std::move(out));
  // Those at the cross ranks `to` (the membership is fixed: not elastic).
  const std::vector<std::shared_ptr<Follower>> followers =
      to != nullptr ? node_->streams_.atCrossRanks(*to) : node_->streams_.streams(/*candidates=*/false);
  for (auto& f : followers) {
    f->stream.send(shared);
    node_->codec_.countSent(shared.bytes);
  }
}

int64_t CrossNode::LeaderSide::heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const {
  return node_->streams_.heardAgeMs(node.cross_rank(), now_ms);
}

Status CrossNode::LeaderSide::majority(const std::string& lost, CrossClock::time_point now, size_t daemons) const {
  if (!node_->options_.failover) return okStatus();
  const size_t reached = 1 + node_->streams_.reachedWithin(lost, nowMs(now), kReachLimitMs);  // itself counted
  if (reached > daemons / 2) return okStatus();
  return failedPrecondition("the leader " + node_->options_.self_address + " lost the majority: it reaches " +
                            std::to_string(reached) + " of the job's " + std::to_string(daemons) +
                            " daemons (itself counted), " + std::to_string(daemons / 2 + 1) +
                            " needed; the others may elect a new leader, so this side stops");
}

}  // namespace gradsync::peer
