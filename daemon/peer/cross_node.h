// SPDX-License-Identifier: Apache-2.0
// The multi-node side of a Job (see proto/gradsync/v1/peer.proto and this
// package's README.md: a collective across nodes, and what happens when a
// node is lost): forming the membership (leader collects JoinJob calls; a
// follower joins its leader), the coordination streams (followers forward
// requests, the leader streams back ordered batches), failure
// announcements, and the UCX ring the executor uses.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/ring_allreduce.h"
#include "daemon/coordinator/request.h"
#include "daemon/coordinator/request_wire.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/coordination_codec.h"
#include "daemon/peer/cross_node_options.h"
#include "daemon/peer/failure_notices.h"
#include "daemon/peer/failure_way.h"
#include "daemon/peer/follower_side.h"
#include "daemon/peer/follower_stream.h"
#include "daemon/peer/follower_streams.h"
#include "daemon/peer/job_endpoints.h"
#include "daemon/peer/job_membership.h"
#include "daemon/peer/join_desk.h"
#include "daemon/peer/leader_election.h"
#include "daemon/peer/leader_rounds.h"
#include "daemon/peer/membership_parts.h"
#include "daemon/peer/node_endpoints.h"
#include "daemon/peer/node_side.h"
#include "daemon/peer/protocol.h"
#include "daemon/peer/ucx_mesh.h"
#include "proto/gradsync/v1/admin.pb.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class CrossNode {
 public:
  // A failure of the job, as the peer side hands it to the job (failure_way.h).
  using Failure = FailureWay::Failure;
  struct Hooks {
    // Follower: a batch of `epoch` from the leader, to execute in arrival
    // order (0: errors only, never executed).
    std::function<void(std::vector<coordinator::Response>, uint64_t sequence, uint64_t epoch,
                       uint64_t fusion_threshold_bytes)>
        on_batch;
    // Leader: a follower's rank submitted a request of `epoch` (0: not
    // elastic); the job drops it when its own epoch has moved on meanwhile.
    std::function<void(int rank, const v1::Enqueue&, uint64_t epoch)> on_remote_request;
    // Leader: the same, by cache id: ranks repeating their requests of a
    // cached response (checked when first negotiated), all of `epoch`, in
    // the order the follower sent them (a node's message at once: one
    // hand-over, not one per rank and tensor).
    std::function<void(std::vector<coordinator::Repeat> repeats, uint64_t epoch)> on_remote_repeats;
    // The job failed: what the peer side detected, or heard from another
    // node (Failure says which); called after the other nodes were told.
    std::function<void(const Failure&)> on_failure;
    // Elastic jobs, leader: ranks (numbered as in `epoch`) were lost: a rank
    // crashed on a follower, or a follower's node was lost or went silent.
    std::function<void(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause)> on_ranks_lost;
    // Elastic jobs, follower: the leader started a new epoch (members() and
    // epoch() tell it already).
    std::function<void(const v1::NewEpoch& change)> on_new_epoch;
  };

  // A node not heard from for this long is lost (heartbeats every second).
  static constexpr int64_t kSilenceLimitMs = NodeSide::kSilenceLimitMs;
  // Leader failover: a leader reaches the followers it heard within this
  // (half the silence limit, so that when a partition's first node is
  // declared lost the others cut with it no longer count).
  static constexpr int64_t kReachLimitMs = kSilenceLimitMs / 2;
  // Leader failover: a voter's whole election ends within this (with a new
  // leader's epoch, or with the job's failure on this side).
  static constexpr int64_t kVotingLimitMs = LeaderElection::kVotingLimitMs;

  CrossNode(CrossNodeOptions options, Hooks hooks);
  ~CrossNode();  // closes streams and joins threads

  // Every local rank has registered: the node holding rank 0 leads, the
  // others join it (on a thread of their own; failures call on_failure).
  // Elastic jobs: with no local rank, this node joins the running job as a
  // candidate for the new ranks registered here (they wait to be admitted).
  void start(const std::vector<int>& local_ranks, const std::vector<int64_t>& pids);
  bool isLeader() const { return side().leads(); }

  // Leader: a follower's JoinJob. `answer` is called once, maybe at once on
  // this thread, never under a lock of this: with the membership once every
  // node joined, or why not (refused, the others did not join within the
  // join timeout, the job stopped). No thread waits meanwhile.
  using JoinAnswer = JoinDesk::JoinAnswer;
  void acceptJoin(const v1::JoinJobRequest& request, JoinAnswer answer);
  // Leader: a follower's Coordinate stream, opened with `hello`, its writes
  // going to `stream`: sets the session that serves it, or returns why it is
  // refused.
  grpc::Status serveFollower(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                             std::unique_ptr<FollowerSession>* session);

  // Follower: forwards a local rank's request of `epoch` to the leader.
  void forward(int rank, const v1::Enqueue& enqueue, uint64_t epoch) { follower_->forward(rank, enqueue, epoch); }
  // Leader: sends a batch of `epoch`, to run with `fusion_threshold_bytes`,
  // to every follower, before executing it; waits (up to the join timeout)
  // until every follower is attached.
  Status broadcast(const std::vector<coordinator::Response>& batch, uint64_t sequence, uint64_t epoch,
                   uint64_t fusion_threshold_bytes);
  // Leader: the request of a rank on another node failed on its own.
  void sendError(const coordinator::Request& request, const Status& status);
  // A failure this node's job detected (a rank left or crashed, its own
  // part of the work failed, the daemon stops), never one on_failure handed
  // it, as `cause` (led by the job's name): the other nodes hear of it, once per kind (a lost node is news
  // after a departed rank), before the job fails its work with it.
  void failedHere(const std::string& cause, bool node_lost);
  // The job stopped on this node: what the peer side detects or hears from
  // now on (its streams ending) is the job's end, told to no one.
  void jobStopped();
  // A follower's AbortJob: the job failed on that node since a node was
  // lost; fails it here too (through on_failure).
  Status acceptAbort(const v1::AbortJobRequest& request);
  // Ends every data-plane wait of this job now and from now on (a node was
  // lost, the job stops), and a join to the leader in progress.
  void abortTransfers(const std::string& reason);
  // The job's endpoints (job_endpoints.h): what its data plane asks for,
  // the executor thread's drive between batches, the goodbye at the end.
  JobEndpoints& endpoints() { return endpoints_; }
  // True once every node joined (the membership is known).
  bool formed() const;
  // Leader failover: this follower lost the leader of the current epoch
  // and takes part in the election of the next one (until its epoch).
  bool electing() const;
  // Once formed: whether the job runs cached collectives after rounds
  // among the daemons (every node offered it; never for elastic jobs).
  bool steadyStateRounds() const;
  // Once formed: the job's rounds through the leader (every node offered
  // them, not every node rounds among the daemons; never for elastic
  // jobs), made on first use; null otherwise. Lives as long as this.
  RoundExchange* leaderRounds();
  // Waits until the job formed (true), stopped or `deadline` passed.
  bool waitFormed(CrossClock::time_point deadline);
  // The cached response a local request repeats (0: none), and a copy of
  // a cached response.
  uint64_t cachedId(const coordinator::Request& request) const;
  std::optional<coordinator::Response> cachedResponse(uint64_t id) const;
  // Leader: the ranks whose nodes have not joined yet (empty elsewhere).
  std::vector<int> missingRanks() const;

  // Elastic jobs (the leader decides: leader_side.h).
  uint64_t epoch() const;
  // Leader: starts the next epoch without `lost` (ranks numbered as in
  // `epoch`, translated to the current numbering): survivors keep their
  // order, nodes left without ranks are removed (and refused as stale from
  // now on) unless new ranks wait there to join (admitted in this epoch),
  // the ring re-forms, the followers are told. Ends this node's transfers
  // of the old epoch. Returns the change (below_minimum when
  // fewer than the job's minimum remain: it waits for joiners); NOT_FOUND
  // when every lost rank is gone already; FAILED_PRECONDITION (nothing
  // changed) when the leader's node would hold no rank.
  StatusOr<v1::NewEpoch> beginEpoch(const std::vector<int>& lost, uint64_t epoch, const std::string& cause);
  // Elect: a follower's vote for this daemon to lead (leader failover),
  // held with its answer until the election decides (no thread waits);
  // counted until voterGone(the id returned).
  uint64_t acceptVote(const v1::ElectRequest& request, LeaderElection::Answer answer) {
    return election_.acceptVote(request, std::move(answer));
  }
  void voterGone(uint64_t vote) { election_.voterGone(vote); }
  // Follower: a local rank of `epoch` crashed; the leader decides.
  void reportRankLost(int rank, uint64_t epoch, const std::string& cause) {
    follower_->reportRankLost(rank, epoch, cause);
  }
  // Leader: starts the next epoch with the ranks waiting to join: the
  // leader's own (`local`: its joiners' ids) and those the followers
  // reported, numbered as EpochBook::admit says (with none left, an epoch
  // all the same: the ranks were told one comes). `when` ends the cause:
  // "at the commit 'x'".
  StatusOr<v1::NewEpoch> admitJoiners(const std::vector<uint64_t>& local, const std::string& when);
  // Leader: a follower reported a rank waiting to join.
  bool hasPendingJoiners() const;
  // Follower: a new rank waits here to join (its stream is open), or left
  // before it was admitted.
  void reportJoiner(uint64_t id, int64_t pid, const std::string& description) {
    follower_->reportJoiner(id, pid, description);
  }
  void reportJoinerGone(uint64_t id) { follower_->reportJoinerGone(id); }
  // Follower: how many times it followed a new leader (failover); joiners
  // reported to the old one are reported again.
  uint64_t leaderChanges() const { return follower_->leaderChanges(); }
  // Leader: whether the asking node is still in the job (CheckMember).
  StatusOr<v1::CheckMemberResponse> checkMember(const v1::CheckMemberRequest& request) const;
  // Leader: the nodes of a membership it announced in parts (Members).
  StatusOr<v1::MembersResponse> membersPart(const v1::MembersRequest& request) const;
  std::vector<v1::NodeInfo> members() const;
  // The same, with the epoch they belong to.
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const;
  // This node's position in the ring; valid once the job formed.
  int selfCrossRank() const;
  // Heartbeats (every second) and silence checks: a node not heard from for
  // kSilenceLimit is declared lost. Called from the daemon's housekeeping.
  void tick(CrossClock::time_point now);
  // Membership with roles, heartbeat ages and neighbour traffic, for
  // gradsyncctl. `busy_seconds`: time spent in cross-node transfers.
  void describe(v1::JobInfo* info, CrossClock::time_point now, double busy_seconds) const;

 private:
  // Elastic. Follower: applies the leader's epoch.
  void applyNewEpoch(const v1::NewEpoch& change);
  // A node's loss (`node` as in `epoch`): a new epoch (elastic) or the
  // job's failure.
  void nodeLost(const v1::NodeInfo& node, uint64_t epoch, const std::string& cause);
  // The housekeeping thread was not scheduled for a while (this daemon was
  // paused), or this is its first tick: peers' silence so far is then this
  // daemon's own doing. Housekeeping thread only.
  bool selfPaused(CrossClock::time_point now);

  // What the follower's side asks of this node (FollowerSide::Host).
  class FollowerHost;

  // Leader failover (LeaderElection): what the election asks of this,
  // through election_host_. A candidate with a majority in `epoch` leads
  // (LeaderSide::takeOver); a voter follows the leader it elected
  // (FollowerSide::follow).
  class ElectionHost;

  // The leader's side (leader_side.h: the followers' joins and streams,
  // the memberships it published, the epochs it tells; a follower's is
  // FollowerSide).
  class LeaderSide;
  NodeSide& side() const { return *side_.load(); }

  const CrossNodeOptions options_;
  const Hooks hooks_;
  // Leader failover: this daemon's part in electing the next leader.
  const std::unique_ptr<ElectionHost> election_host_;
  LeaderElection election_;  // its own lock, a leaf

  // The UCX endpoints to the other daemons, and the rings and meshes of
  // an epoch over them (the UCX mesh's lock is taken under the
  // membership's where an epoch change must be ordered with it).
  JobEndpoints endpoints_;
  // The members of each epoch, the NCCL id, whether the job stopped or its
  // transfers ended (job_membership.h: its own lock, over which the
  // leader's side changes them together with its parts).
  JobMembership membership_;
  // The way of a failure: told to the other nodes through the current
  // side, handed to the job (hooks_.on_failure), and what was told or
  // heard (FailureNotices: its own lock, a leaf).
  FailureWay failures_;
  CrossClock::time_point last_heartbeat_;  // housekeeping thread only
  CrossClock::time_point last_tick_;       // housekeeping thread only

  // The response cache and the coordination traffic (codec_.clear() at
  // each epoch: the leader's in the order of its streams, LeaderSide).
  CoordinationCodec codec_;

  // The rounds through the leader, made when first used or first heard
  // of, if the job runs them (null: not yet, or not this job). Its lock is
  // taken before the membership's, never the other way.
  LeaderRounds* rounds() GS_EXCLUDES(rounds_mutex_);
  void abortRounds(const std::string& reason) GS_EXCLUDES(rounds_mutex_);
  Mutex rounds_mutex_;
  std::unique_ptr<LeaderRounds> rounds_ GS_GUARDED_BY(rounds_mutex_);

  // The two sides, made last (a follower's uses codec_ and failures_), and
  // the current one: set by start(), the leader's after a takeover; read
  // by housekeeping and peer calls.
  const std::unique_ptr<FollowerHost> follower_host_;
  const std::unique_ptr<FollowerSide> follower_;
  const std::unique_ptr<LeaderSide> leader_side_;
  std::atomic<NodeSide*> side_;
};

}  // namespace gradsync::peer
