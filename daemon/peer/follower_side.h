// SPDX-License-Identifier: Apache-2.0
// A follower's side of a job across daemons: joining the leader
// (LeaderJoin), the link to it (LeaderLink) and the reader thread that
// follows its stream (through a failover to the next leader, where on),
// what this node writes to it (requests, lost ranks, joiners, heartbeats,
// failures, rounds), and its relays among the followers when the leader is
// what was lost (AbortNotices). Its own state under its own lock, a leaf;
// what the messages mean for the membership and the job it asks of its
// Host (CrossNode), never under this lock. Unit-tested with a stand-in
// host and a fake leader over loopback gRPC.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/coordinator/request.h"
#include "daemon/peer/abort_notices.h"
#include "daemon/peer/batch_parts.h"
#include "daemon/peer/coordination_codec.h"
#include "daemon/peer/cross_node_options.h"
#include "daemon/peer/failure_notices.h"
#include "daemon/peer/leader_join.h"
#include "daemon/peer/leader_link.h"
#include "daemon/peer/node_side.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class FollowerSide final : public NodeSide {
 public:
  // What following asks of the rest of the node: the membership, what the
  // leader's messages make the job do, the election, and where failures go.
  // Called on the reader thread (and the housekeeping thread: tick), never
  // under FollowerSide's lock.
  class Host {
   public:
    virtual ~Host() = default;
    // The leader's answer to JoinJob, every node's part read: the
    // membership forms here.
    virtual void joined(const v1::JoinJobResponse& response) = 0;
    virtual uint64_t epoch() const = 0;
    virtual int selfCrossRank() const = 0;
    // The current members in cross-rank order (the leader first).
    virtual std::vector<v1::NodeInfo> members(uint64_t* epoch) const = 0;
    // The node stops: a stream's end is the job's end, not a loss.
    virtual bool stopping() const = 0;
    // The leader's messages: a message of the rounds through it; a whole
    // batch, decoded; a new epoch, its members complete.
    virtual void round(const v1::RoundMessage& message) = 0;
    virtual void batch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                       uint64_t fusion_threshold_bytes) = 0;
    virtual void newEpoch(const v1::NewEpoch& change) = 0;
    // Leader failover, after the leader's stream ended (`cause`): true when
    // this node leads now, false when it follows the elected leader
    // (follow() was called); an error when the election failed.
    virtual StatusOr<bool> elect(const std::string& cause) = 0;
    // A failure this side detected (the other nodes are told through the
    // current side, then the job fails), one heard from `from`, and the
    // leader lost (told around it too).
    virtual void failureDetected(std::string cause, bool node_lost) = 0;
    virtual void heardFailure(const v1::JobFailure& failure, const std::string& from) = 0;
    virtual void leaderLost(std::string cause) = 0;
  };

  // `codec` (the node's response cache and traffic counters) and
  // `notices` (what the node told or heard of the job's failure) are the
  // node's, shared with its other parts; they and `host` outlive this.
  FollowerSide(CrossNodeOptions options, CoordinationCodec* codec, FailureNotices* notices, Host* host);
  ~FollowerSide();  // leave(), if not yet

  // Joins the leader as `self` and follows its stream, on a thread of its
  // own, until it ends (failures go to the host).
  void start(v1::NodeInfo self);
  // Ends a join to the leader in progress with `reason` (the job failed).
  void abortJoin(const std::string& reason) { join_.abort(reason); }
  // The node stops: no join is tried again.
  void stopJoining() { join_.stop(); }
  // The node's end: the stream is closed gracefully (the leader then knows
  // this node's ranks finished), or cancelled when the reader does not see
  // it end within 2 s; the reader thread is joined, and the AbortJob calls
  // to the relays answered (they carry the cause). Idempotent.
  void leave() GS_EXCLUDES(mutex_);

  // Leader failover, on the reader thread (through the host's elect()):
  // follows `leader`, elected with `answer`: the new epoch (its members
  // read in full over `channel`) applied, the stream opened to it.
  Status follow(const v1::NodeInfo& leader, const std::shared_ptr<grpc::Channel>& channel, v1::ElectResponse answer);
  // How many times it followed a new leader.
  uint64_t leaderChanges() const { return leader_changes_.load(); }

  // To the leader: a local rank's request of `epoch`; a local rank of
  // `epoch` crashed; a new rank waits here to join, or left before it was
  // admitted.
  void forward(int rank, const v1::Enqueue& enqueue, uint64_t epoch);
  void reportRankLost(int rank, uint64_t epoch, const std::string& cause);
  void reportJoiner(uint64_t id, int64_t pid, const std::string& description);
  void reportJoinerGone(uint64_t id);
  // Elastic jobs, after the leader's stream broke: asks the leader whether
  // this node was removed; returns why (empty: still a member, or no answer).
  std::string askIfRemoved();

  // NodeSide.
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
  // The reader thread: joins, then follows the leader's stream.
  Status joinLeader(const v1::NodeInfo& self);
  v1::JoinJobRequest joinRequest(const v1::NodeInfo& self) const;
  // Opens the coordination stream to the leader link_ points at (hello,
  // then what waited).
  void openStream();
  // Follows the leader's stream until it ends (through a failover to a new
  // leader, where switched on), then says how it ended.
  void readLeader();
  void onLeaderMessage(const v1::LeaderMessage& message);
  void onBatchPart(const v1::Batch& part);
  std::string leaderDescription() const;
  void readerDone() GS_EXCLUDES(mutex_);
  // Once: AbortJob to this follower's relays among the other followers
  // (AbortNotices::relaysOf: each passes it on once, so every follower
  // hears within log2 F hops), asynchronously; leave() waits for the
  // answers, each bounded by a short deadline.
  void tellOtherFollowers(const v1::JobFailure& failure) GS_EXCLUDES(mutex_);

  const CrossNodeOptions options_;
  CoordinationCodec* const codec_;
  FailureNotices* const notices_;
  Host* const host_;
  LeaderJoin join_;  // its own lock, a leaf
  LeaderLink link_;
  BatchAssembler batch_parts_;  // the reader thread's: the leader's batch being received
  std::atomic<uint64_t> leader_changes_{0};
  std::thread reader_;

  mutable Mutex mutex_;
  CondVar reader_done_cv_;
  bool reader_done_ GS_GUARDED_BY(mutex_) = false;  // the leader's stream ended for good
  bool leaving_ GS_GUARDED_BY(mutex_) = false;
  std::shared_ptr<AbortNotices> abort_notices_ GS_GUARDED_BY(mutex_);  // set once
};

}  // namespace gradsync::peer
