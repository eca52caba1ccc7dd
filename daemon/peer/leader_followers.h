// SPDX-License-Identifier: Apache-2.0
// The leader's service of its followers' coordination streams (a part of
// LeaderSide): a member's or a candidate's stream, checked (token,
// protocol, cross rank) and attached to FollowerStreams; each message on it
// (a follower's requests to the job, in order, runs by cache id together;
// its lost ranks, joiners, rounds and failures); a message from a node the
// job removed, answered as stale; and the stream's end (a candidate is
// forgotten, a member's node lost, or its ranks finished). The membership
// it reads and changes is CrossNode's (JobMembership), under the
// membership's lock; FollowerStreams' lock is taken under it. Included by
// the files of CrossNode only.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "daemon/peer/leader_side.h"

namespace gradsync::peer {

class CrossNode::LeaderSide::Followers {
 public:
  // Serves the followers of `node` whose streams `streams` holds.
  Followers(CrossNode* node, FollowerStreams& streams);
  Followers(const Followers&) = delete;
  Followers& operator=(const Followers&) = delete;

  // A follower's Coordinate stream, opened by `hello`: attached, and its
  // messages served by `*session` from now on.
  grpc::Status serve(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                     std::unique_ptr<FollowerSession>* session) GS_EXCLUDES(members_.mutex());
  // Tells a follower the job removed why (a JobFailure on its stream).
  static void tellRemoved(Follower* follower, const std::string& why);

 private:
  class Served;  // a follower's FollowerSession

  // The stream of a member (by its cross rank) or a candidate, checked and
  // recorded; `failure`: what it must hear first.
  grpc::Status attach(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                      std::shared_ptr<Follower>* attached, std::optional<SharedMessage>* failure)
      GS_EXCLUDES(members_.mutex());
  // One message on `follower`'s stream (refused when the job removed it).
  grpc::Status message(Follower* follower, const v1::FollowerMessage& message) GS_EXCLUDES(members_.mutex());
  void dispatch(Follower* follower, const v1::FollowerMessage& message) GS_EXCLUDES(members_.mutex());
  // A follower's `count` requests, to the job in order (each dropped when
  // of an epoch that ended), runs of requests by cache id together; false
  // when one names a cache id this leader never gave, or a rank that id
  // does not hold (the job fails).
  bool passToJob(const v1::FollowerMessage::Request* const* requests, int count) GS_EXCLUDES(members_.mutex());
  // A follower's JoinerReady or JoinerGone.
  void joinerReport(Follower* follower, const v1::FollowerMessage& message) GS_EXCLUDES(members_.mutex());
  // The stream ended (`cut_off`: the call was cancelled, not closed;
  // `why`: the leader cut it).
  void left(const std::shared_ptr<Follower>& follower, bool cut_off, const std::string& why)
      GS_EXCLUDES(members_.mutex());
  // A candidate's stream ended before its ranks were admitted: it and its
  // joiners are forgotten.
  void candidateLeft(const std::shared_ptr<Follower>& candidate) GS_EXCLUDES(members_.mutex());

  CrossNode* const node_;
  const CrossNodeOptions& options_;  // node_'s
  JobMembership& members_;           // node_'s
  FollowerStreams& streams_;         // the leader's side's
};

}  // namespace gradsync::peer
