// SPDX-License-Identifier: Apache-2.0
// CrossNode's two roles, as types: the leader's side (the followers'
// streams, FollowerStreams, and what it tells them) and a follower's (the
// link to its leader, LeaderLink, and its relays among the followers for a
// lost node). CrossNode holds one of each and asks the current one; a
// follower that wins an election switches to the leader's. Included by the
// files of CrossNode only.
#pragma once

#include "daemon/peer/cross_node.h"

namespace gradsync::peer {

class CrossNode::LeaderSide final : public CrossNode::Side {
 public:
  explicit LeaderSide(CrossNode* node) : node_(node) {}
  bool leads() const override { return true; }
  int crossRank(const membership::EpochBook&) const override { return 0; }
  // Joins past their deadline answered, heartbeats to the followers and
  // candidates, silent members (and, after a takeover, those that never
  // followed) lost.
  void tick(CrossClock::time_point now, bool send, bool paused) override;
  // To every follower and candidate but `teller`, and to each that attaches
  // later.
  void tell(const std::string& text, bool node_lost, const Follower* teller, FailureNotices::Route) override;
  // One follower told it (also since a takeover): the others are told.
  void heard(const v1::JobFailure& failure, const Follower* teller) override;
  void relayAbort(const v1::JobFailure&) override {}
  void sendRound(const v1::RoundMessage& message, const std::vector<int>* to) override;
  int64_t heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const override;
  // With failover: OK while it reaches (kReachLimitMs) a strict majority
  // of `daemons`, itself counted and `lost` not; else FAILED_PRECONDITION
  // saying it lost the majority (the others may be electing a new leader).
  Status majority(const std::string& lost, CrossClock::time_point now, size_t daemons) const override;
  std::unique_ptr<LeaderRounds> makeRounds(size_t daemons, LeaderRounds::Send send,
                                           LeaderRounds::Idle idle) const override {
    return std::make_unique<LeadingRounds>(static_cast<int>(daemons) - 1, std::move(send), std::move(idle));
  }

 private:
  CrossNode* const node_;
};

class CrossNode::FollowerSide final : public CrossNode::Side {
 public:
  explicit FollowerSide(CrossNode* node) : node_(node) {}
  bool leads() const override { return false; }
  int crossRank(const membership::EpochBook& book) const override { return book.selfCrossRank(); }
  // A heartbeat to the leader, a silent leader lost (or, with failover, its
  // stream cut for the reader to elect).
  void tick(CrossClock::time_point now, bool send, bool paused) override;
  // To the leader, which tells every other node; around the leader (it was
  // lost), to this follower's relays among the followers too.
  void tell(const std::string& text, bool node_lost, const Follower* teller, FailureNotices::Route route) override;
  // From a node that told every other: passed on to no one.
  void heard(const v1::JobFailure& failure, const Follower* teller) override;
  // A notice of a follower that lost a node (perhaps the leader, which then
  // tells no one): passed on once, to this follower's relays.
  void relayAbort(const v1::JobFailure& failure) override;
  void sendRound(const v1::RoundMessage& message, const std::vector<int>* to) override;
  int64_t heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const override;
  Status majority(const std::string&, CrossClock::time_point, size_t) const override { return okStatus(); }
  std::unique_ptr<LeaderRounds> makeRounds(size_t, LeaderRounds::Send send, LeaderRounds::Idle idle) const override {
    return std::make_unique<FollowingRounds>(std::move(send), std::move(idle));
  }

 private:
  CrossNode* const node_;
};

}  // namespace gradsync::peer
