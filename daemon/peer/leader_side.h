// SPDX-License-Identifier: Apache-2.0
// The leader's side of a job across daemons (a NodeSide), with its own
// state: the followers' JoinJob calls while the job forms (JoinDesk), their
// coordination streams and the candidates' (FollowerStreams), the
// memberships it published for the nodes that read them in parts, and the
// order of what it writes to every stream (a batch's encoding, an epoch's
// cache reset). It serves the followers' streams through Followers
// (leader_followers.h: their requests to the job, their lost ranks,
// joiners and failures, their departure), sends the batches, tells the
// epochs it decides, beats the heart and watches the followers' silence.
// The membership it reads and changes is CrossNode's (JobMembership),
// under the membership's lock: its own parts' locks are taken under that
// one, never the other way. CrossNode holds it beside a follower's side
// (FollowerSide) and asks the current one; a follower that wins an election
// switches to this one. Included by the files of CrossNode only.
#pragma once

#include "daemon/peer/cross_node.h"

namespace gradsync::peer {

class CrossNode::LeaderSide final : public NodeSide {
 public:
  explicit LeaderSide(CrossNode* node);
  ~LeaderSide() override;

  // The job forms with `self` leading (the followers' JoinJob calls are
  // checked against it).
  void open(const v1::NodeInfo& self) { joins_.open(self); }
  // CrossNode::acceptJoin: a follower's JoinJob, answered once.
  void acceptJoin(const v1::JoinJobRequest& request, JoinAnswer answer) GS_EXCLUDES(members_.mutex());
  // The answers due at `now` (all of them once the job formed; those past
  // their deadline; all when it stops), to call outside the lock.
  JoinDesk::Answers dueJoinsLocked(CrossClock::time_point now) GS_REQUIRES(members_.mutex());
  JoinDesk::Answers dueJoins(CrossClock::time_point now) GS_EXCLUDES(members_.mutex());
  // The ranks whose nodes have not joined yet (empty once formed).
  std::vector<int> missingRanks() const GS_EXCLUDES(members_.mutex());
  // CrossNode::membersPart: a part of a membership it published.
  StatusOr<v1::MembersResponse> membersPart(const v1::MembersRequest& request) const GS_EXCLUDES(members_.mutex());

  // Its service of the followers' Coordinate streams (leader_followers.h).
  class Followers;
  Followers& followers() { return *followers_; }
  // CrossNode::broadcast and sendError: a batch to every follower, an
  // error to the follower holding the request's rank.
  Status broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence, uint64_t epoch,
                   uint64_t fusion_threshold_bytes) GS_EXCLUDES(members_.mutex());
  void sendError(const coordinator::Request& request, const Status& status);

  // CrossNode::beginEpoch and admitJoiners: the next epoch without lost
  // ranks, or with the waiting joiners, told to the followers.
  StatusOr<v1::NewEpoch> beginEpoch(const std::vector<int>& lost, uint64_t epoch, const std::string& cause)
      GS_EXCLUDES(members_.mutex());
  StatusOr<v1::NewEpoch> admitJoiners(const std::vector<uint64_t>& local, const std::string& when)
      GS_EXCLUDES(members_.mutex());
  // Leader failover: this daemon won the election of `epoch`: it leads the
  // next epoch without the lost leader's node (this side current from now
  // on, the voters' streams awaited), told to the followers and taken by
  // the Job before any voter is answered.
  StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) GS_EXCLUDES(members_.mutex());

  // NodeSide.
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
  // acceptJoin's parts: the answer now (nullopt: it waits for the other
  // nodes), and the membership once formed.
  std::optional<StatusOr<v1::JoinJobResponse>> joinLocked(const v1::JoinJobRequest& request)
      GS_REQUIRES(members_.mutex());
  v1::JoinJobResponse membershipLocked() GS_REQUIRES(members_.mutex());
  // Records `nodes` as the membership of `epoch` and keeps only its first
  // part in them; returns the message's node_count (0: all fit).
  int32_t publishLocked(uint64_t epoch, NodeList* nodes) GS_REQUIRES(members_.mutex());
  // A node holding no rank asks to join the running job for its new ranks
  // (JoinJobRequest.elastic_join): kept as a candidate.
  StatusOr<v1::JoinJobResponse> acceptCandidate(const v1::JoinJobRequest& request) GS_EXCLUDES(members_.mutex());

  // An epoch the leader decided, and the followers to tell.
  struct EpochPlan {
    v1::NewEpoch change;
    FollowerStreams::Renumbered followers;
  };
  // The epoch the book `decided` (or its error), with this node's
  // transfers of the old epoch ended and the followers' streams placed in
  // it (those left out are removed, candidates admitted join); the
  // followers are told by announceEpoch, once the lock is released.
  StatusOr<EpochPlan> planEpochLocked(StatusOr<v1::NewEpoch> decided) GS_REQUIRES(members_.mutex());
  // Sends the plan's NewEpoch to the kept followers (after every batch
  // encoded with the old cache) and tells the removed ones.
  v1::NewEpoch announceEpoch(EpochPlan plan) GS_EXCLUDES(members_.mutex());
  // Why not every follower's stream is attached yet, naming the members
  // whose stream never opened.
  std::string unattachedLocked() const GS_REQUIRES(members_.mutex());

  CrossNode* const node_;
  const CrossNodeOptions& options_;  // node_'s
  // node_'s membership: its lock is the one the steps below hold over the
  // membership and this side's parts together.
  JobMembership& members_;
  // The followers' JoinJob calls while the job forms (its own lock; taken
  // under the membership's, never the other way).
  JoinDesk joins_;
  // The members' streams, and those of the nodes that joined the running
  // job for new ranks (the book's candidates: their stream, once open, gets
  // heartbeats and failures, and the epoch that admits them). Its own lock;
  // taken under the membership's where the book must not change meanwhile,
  // never the other way.
  FollowerStreams streams_;
  // The memberships it announced, for the nodes that read them in parts.
  PublishedMembers published_ GS_GUARDED_BY(members_.mutex());
  // A batch's encoding and its writes, and an epoch's cache reset and
  // NewEpoch, happen in one order on every stream. Taken before any
  // follower's stream lock, never with the membership's.
  Mutex order_mutex_;
  // Serves the streams of streams_.
  const std::unique_ptr<Followers> followers_;
};

}  // namespace gradsync::peer
