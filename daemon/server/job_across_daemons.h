// SPDX-License-Identifier: Apache-2.0
// A job across daemons, its side that meets the peer side, for Job's files
// only: it builds the job's CrossNode with its hooks into the job, and owns
// the data plane among the daemons (peer::PeerDataPlane). Through the hooks
// come a follower's requests (on the leader), the leader's batches (on a
// follower), and the failures met in the data plane, which it settles into
// the job's failure; and it starts the node's role once every local rank
// registered.
//
// The job's state (its negotiation, queue of batches, epochs, failure) it
// reads and changes under the job's lock, as the job's other parts do.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "base/thread_annotations.h"
#include "daemon/server/job.h"

namespace gradsync::server {

class Job::AcrossDaemons {
 public:
  explicit AcrossDaemons(Job& job) : job_(job) {}
  AcrossDaemons(const AcrossDaemons&) = delete;
  AcrossDaemons& operator=(const AcrossDaemons&) = delete;

  // The job's CrossNode, with its hooks into the job (construction).
  std::unique_ptr<peer::CrossNode> makeNode();
  // A job that is not elastic: the steady-state rounds over `node`'s
  // response cache (construction).
  std::unique_ptr<SteadyRounds> makeRounds(peer::CrossNode& node);
  // The data plane among the daemons over `node`'s endpoints (construction),
  // and its end (before `node` ends).
  peer::PeerDataPlane* makeDataPlane(peer::CrossNode& node);
  void closeDataPlane() { data_plane_.reset(); }

  // Once every local rank registered, takes up this node's role (leader or
  // follower) and replays the requests that waited for it. Idempotent.
  void startIfComplete() GS_EXCLUDES(job_.mutex_);
  // A cross-node transfer failed with `status`: fails the job (node lost)
  // and returns the error led by the job's earlier failure, if any (the
  // likely reason the other node left the ring).
  Status ringFailed(const Status& status) GS_EXCLUDES(job_.mutex_);
  // Who holds the ranks of other nodes, for stall messages: the membership
  // once formed, and again in each epoch (nullopt: unchanged since the
  // last call).
  std::optional<std::vector<v1::NodeInfo>> newMembers();
  // What the job does across daemons, for JobInfo.
  void describe(v1::JobInfo* info) const;

 private:
  // A follower's rank's request of `epoch`; one of an epoch that ended
  // while it was on its way is dropped (its follower fails it).
  void submitRemote(int rank, const v1::Enqueue& enqueue, uint64_t epoch) GS_EXCLUDES(job_.mutex_);
  // The same for requests by cache id: ranks repeating requests the
  // leader checked when first negotiated. A follower's message of them is
  // admitted under one lock.
  void submitRemoteRepeats(std::vector<coordinator::Repeat> repeats, uint64_t epoch) GS_EXCLUDES(job_.mutex_);
  // `request` (or why it was refused; `enqueue` names it then) into the
  // negotiation, unless its epoch ended or its rank is not another node's.
  void admitRemoteLocked(int rank, StatusOr<coordinator::Request> request, const v1::Enqueue* enqueue, uint64_t epoch,
                         RankMessages* to_ranks) GS_REQUIRES(job_.mutex_);
  // The same for the ranks of `repeat`.
  void admitRepeatLocked(coordinator::Repeat repeat, uint64_t epoch, RankMessages* to_ranks) GS_REQUIRES(job_.mutex_);
  // Whether a follower's request of `rank` may be negotiated here (a rank
  // of this node's is not: warned of).
  bool isOtherNodesRankLocked(int rank) const GS_REQUIRES(job_.mutex_);
  // Follower: the leader's batch `sequence` of `epoch`, queued to run.
  void onRemoteBatch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t epoch,
                     uint64_t fusion_threshold_bytes) GS_EXCLUDES(job_.mutex_);
  // This node's part of a collective across daemons failed before or
  // without its transfers (`cause`, named by batch and response): a job
  // that is not elastic fails by name on every daemon at once (its peers
  // would otherwise wait in those transfers until their timeout); in an
  // elastic job the new epoch that a lost rank starts ends their waits, and
  // where none starts within the silence limit (its ranks stay), the job
  // fails as a job that is not elastic does.
  void localPartFailed(const Status& cause) GS_EXCLUDES(job_.mutex_);

  Job& job_;
  // The bytes among the daemons.
  std::unique_ptr<peer::PeerDataPlane> data_plane_;
  // The epoch of the members newMembers() last gave.
  std::atomic<uint64_t> members_epoch_{0};
};

}  // namespace gradsync::server
