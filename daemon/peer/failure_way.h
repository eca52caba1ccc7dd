// SPDX-License-Identifier: Apache-2.0
// The way a failure of a job travels from this node's peer side: one way.
//  - What this peer side detects (a node lost or silent, the leader lost, a
//    protocol error, the UCX data plane) is told to the other nodes through
//    the current side (a follower tells the leader, the leader every
//    follower; a follower that lost the leader tells its relays around it),
//    once per kind (FailureNotices), then handed to the job.
//  - What the job detects (a rank left, its own part failed, the daemon
//    stops) is told the same way and never handed back.
//  - What is heard from another node is handed to the job; only the leader
//    passes on what it heard (from one follower, to every other): a
//    follower heard it from a node that told every other.
// It holds the notices and the job's hook; the side is asked for each
// notice (a follower becomes a leader at a takeover). No lock of its own:
// FailureNotices has one, a leaf; the hook and the side are called without
// any lock of this held.
#pragma once

#include <functional>
#include <string>

#include "daemon/peer/failure_notices.h"
#include "daemon/peer/node_side.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class FailureWay {
 public:
  // A failure of the job, as the peer side hands it to the job.
  struct Failure {
    std::string cause;
    // A node, the leader or the data plane was lost: what was negotiated
    // cannot run either (false: a rank left or died somewhere).
    bool node_lost = false;
    // The node that told this one (its address or description); empty
    // when this node's peer side detected the failure itself. Either way
    // the other nodes have been told (the peer side tells them what it
    // detects, and the leader what it hears from a follower): the job here
    // fails its own work and passes it on to no one.
    std::string heard_from;
  };
  using OnFailure = std::function<void(const Failure&)>;
  // `side`: this node's side now. `on_failure` may be empty (no job hears).
  FailureWay(std::string job_id, std::function<NodeSide&()> side, OnFailure on_failure);

  // What a failure told or heard changes; FollowerSide reads and writes
  // them too (a removal, what it heard).
  FailureNotices& notices() { return notices_; }

  // The peer side detected `cause`: told, then handed to the job. A node's
  // ranks finishing (`node_lost` false) after a failure was told or heard
  // is that failure's consequence: only logged.
  void detected(std::string cause, bool node_lost);
  // A follower lost the leader: detected, and told around the leader too
  // (the leader may tell no one).
  void leaderLost(std::string cause);
  // The job detected `cause` (led by the job's name): told, not handed back.
  void jobDetected(const std::string& cause, bool node_lost) { announce(cause, node_lost); }
  // Another node (`from`) told this one: the side does what it does with a
  // heard failure, then the job hears it. `teller`: the leader's follower
  // that told it.
  void heard(const v1::JobFailure& failure, const std::string& from, const Follower* teller = nullptr);
  // The leader's part of heard(): the other followers are told, but not
  // `teller` (nothing once the job stopped here).
  void passOn(const v1::JobFailure& failure, const Follower* teller);
  // The job stopped here: what is detected or heard from now on is its end.
  void jobStopped() { notices_.jobStopped(); }

 private:
  // Tells the other nodes `text`, once per kind (FailureNotices::tell).
  void announce(const std::string& text, bool node_lost, const Follower* teller = nullptr,
                FailureNotices::Route route = FailureNotices::Route::kThroughTheLeader);
  // `cause` led by the job's name, as the other nodes are told it.
  std::string named(const std::string& cause) const;
  void handToTheJob(Failure failure) const;

  const std::string job_id_;
  const std::function<NodeSide&()> side_;
  const OnFailure on_failure_;
  FailureNotices notices_;
};

}  // namespace gradsync::peer
