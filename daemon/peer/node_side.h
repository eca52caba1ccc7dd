// SPDX-License-Identifier: Apache-2.0
// What differs between leading a job across daemons and following its
// leader: CrossNode asks its current side, never a role flag. The leader's
// side (CrossNode::LeaderSide, leader_side.h) and a follower's
// (FollowerSide, follower_side.h) implement it; a follower that wins an
// election switches to the leader's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/failure_notices.h"
#include "daemon/peer/follower_streams.h"
#include "daemon/peer/leader_rounds.h"
#include "daemon/peer/node_endpoints.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class NodeSide {
 public:
  // A node not heard from for this long is lost (heartbeats every second).
  static constexpr int64_t kSilenceLimitMs = 6000;

  virtual ~NodeSide() = default;
  virtual bool leads() const = 0;
  // This node's cross rank in `book`'s membership (the leader's is 0
  // before it forms too).
  virtual int crossRank(const membership::EpochBook& book) const = 0;
  // The housekeeping tick's part (`send`: a heartbeat is due; `paused`:
  // this daemon was not scheduled for a while, so the peers' silence so
  // far is its own doing): heartbeats out, and the silence of the nodes it
  // hears from.
  virtual void tick(CrossClock::time_point now, bool send, bool paused) = 0;
  // Sends the failure `text` (told here: FailureNotices) to the other
  // nodes; `teller`: the leader's follower that told it (told nothing back).
  virtual void tell(const std::string& text, bool node_lost, const Follower* teller, FailureNotices::Route route) = 0;
  // What a failure heard from another node makes this side do.
  virtual void heard(const v1::JobFailure& failure, const Follower* teller) = 0;
  // Another follower's AbortJob (the leader hears of it from its
  // followers' streams instead).
  virtual void relayAbort(const v1::JobFailure& failure) = 0;
  // A message of the rounds through the leader (`to`: the cross ranks to
  // send it to; null: all).
  virtual void sendRound(const v1::RoundMessage& message, const std::vector<int>* to) = 0;
  // How long ago `node` was heard from here (-1: not known here).
  virtual int64_t heardAgeMs(const v1::NodeInfo& node, int64_t now_ms) const = 0;
  // OK while this side may make epochs among `daemons` without `lost`.
  virtual Status majority(const std::string& lost, CrossClock::time_point now, size_t daemons) const = 0;
  // This side of the rounds through the leader among `daemons`.
  virtual std::unique_ptr<LeaderRounds> makeRounds(size_t daemons, LeaderRounds::Send send,
                                                   LeaderRounds::Idle idle) const = 0;

  static int64_t nowMs(CrossClock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  }
};

}  // namespace gradsync::peer
