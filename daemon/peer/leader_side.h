// SPDX-License-Identifier: Apache-2.0
// The leader's side of a job across daemons (NodeSide): heartbeats to the
// followers and their silence, what it tells them (the followers' streams,
// FollowerStreams), the majority it reaches. CrossNode holds it beside a
// follower's side (FollowerSide) and asks the current one; a follower that
// wins an election switches to this one. Included by the files of
// CrossNode only.
#pragma once

#include "daemon/peer/cross_node.h"

namespace gradsync::peer {

class CrossNode::LeaderSide final : public NodeSide {
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

}  // namespace gradsync::peer
