// SPDX-License-Identifier: Apache-2.0
// The elastic side of a job, for Job's files only. A lost rank moves the job
// to a new epoch with the survivors: what was in flight fails as retriable
// (ErrorDetail.membership_changed); the survivors keep their order and are
// renumbered 0..n-1; each is told its place (MembershipChange) and takes it
// up when its client rejoins (gradsync_rejoin), after which its collectives
// carry the new epoch. Collectives of another epoch are refused, so no
// rank's old-epoch call can pair with another's new-epoch one.
//
// Across daemons the leader decides each epoch (the membership itself is
// the peer side's: daemon/peer/leader_side.cc) and every node applies it as
// a one-node job does. A new rank registers with its own node's daemon as a
// joiner; a follower reports it to the leader once its stream is open. The
// leader marks the next commit barrier as admitting (before it sends the
// batch, so every node's Dones say so) and, once the barrier completed,
// starts the epoch that numbers the joiners after the survivors.
//
// It owns the local ranks seen stopped (StoppedRanks); the epochs, ranks and
// joiners are the job's state, changed under the job's lock with the rest
// of a step. Its Locked steps name the job whose lock they need (a step of
// the job's, or of its place, calls them with it held); they do nothing for
// a job that is not elastic, which has no joiners and one epoch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "daemon/server/job.h"
#include "daemon/server/stopped_ranks.h"

namespace gradsync::server {

class Job::Elastic {
 public:
  explicit Elastic(Job& job) : job_(job) {}
  Elastic(const Elastic&) = delete;
  Elastic& operator=(const Elastic&) = delete;

  // --- What reaches the job from outside (no lock held).
  // A new rank waiting to be admitted at the next commit barrier.
  // FAILED_PRECONDITION for a job that is not elastic.
  Status addJoiner(std::shared_ptr<Session> session) GS_EXCLUDES(job_.mutex_);
  // Local ranks whose process has been stopped for kStoppedRankLimit.
  std::vector<std::shared_ptr<Session>> stoppedRanks(Clock::time_point now) GS_EXCLUDES(job_.mutex_);
  // Housekeeping: a follower reports its joiners to the leader; below
  // min_size, joiners whose stream is open are admitted, the epoch is
  // announced once it is full, or the job fails after elastic_timeout.
  void housekeeping(Clock::time_point now) GS_EXCLUDES(job_.mutex_);
  // Leader (a hook of the peer side, or a local rank): `ranks` of `epoch`
  // were lost; starts the next epoch everywhere, or fails the job when it
  // cannot go on.
  void ranksLost(const std::vector<int>& ranks, uint64_t epoch, const std::string& cause) GS_EXCLUDES(job_.mutex_);
  // Follower: the leader's new epoch.
  void newEpoch(const v1::NewEpoch& change) GS_EXCLUDES(job_.mutex_);

  // --- Steps of a job's, its lock held.
  // A barrier every rank entered through commit().
  static bool isCommitBarrier(const coordinator::Response& response);
  // Fails every collective of the current epoch (retriable), renumbers the
  // survivors in rank order, starts the next epoch and tells each survivor
  // its place (one node). `admit`: the waiting joiners become ranks too,
  // after the survivors. `announce` false: the new epoch forms below
  // min_size and is announced once joiners fill it (housekeeping), or fails
  // after elastic_timeout.
  void changeEpochLocked(Job& job, const std::string& cause, RankMessages* to_ranks, bool admit = false,
                         bool announce = true) GS_REQUIRES(job.mutex_);
  // Tells every rank its place in the current epoch.
  void announceEpochLocked(Job& job, const std::string& cause, RankMessages* to_ranks) GS_REQUIRES(job.mutex_);
  // Leader: the next epoch without `ranks`. Returns why the job cannot go
  // on (empty when it does; the caller then fails it).
  std::string leadEpochLocked(Job& job, const std::vector<int>& ranks, uint64_t epoch, const std::string& cause,
                              RankMessages* to_ranks) GS_REQUIRES(job.mutex_);
  // Leader: a commit barrier that admits joiners completed (or the epoch
  // waits below the minimum and joiners came); the next epoch takes them
  // in on every node. `when` ends the cause ("at the commit 'x'").
  void admitAcrossLocked(Job& job, const std::string& when, RankMessages* to_ranks) GS_REQUIRES(job.mutex_);
  // Leader: a joiner waits to be admitted, here (stream open) or reported
  // by a follower.
  bool joinersWaitingLocked(const Job& job) const GS_REQUIRES(job.mutex_);
  // The first commit barrier of the leader's batch admits the waiting
  // joiners (local or reported by followers) when there are any.
  void markAdmissionLocked(Job& job, std::vector<coordinator::Response>* batch) GS_REQUIRES(job.mutex_);
  // A commit barrier of a batch begun in `batch_epoch` completed in the
  // current epoch with joiners waiting: true (the Dones say so), and the
  // caller admits them.
  bool admitsJoinersLocked(const Job& job, const coordinator::Response& response,
                           const executor::ResponseResult& result, uint64_t batch_epoch) const GS_REQUIRES(job.mutex_);
  // An enqueue of another epoch (or of a joiner not yet admitted): fails
  // it (retriable); true when it did.
  bool refuseStaleEpochLocked(Job& job, const std::shared_ptr<Session>& session, const v1::Enqueue& enqueue,
                              RankMessages* to_ranks) GS_REQUIRES(job.mutex_);
  // Tells the ranks waiting to join that the job will not take them.
  void refuseJoinersLocked(Job& job, const std::string& cause, RankMessages* to_ranks) GS_REQUIRES(job.mutex_);
  // The same, and the ranks (which may wait in rejoin) that the job failed.
  void refuseAllLocked(Job& job, const std::string& cause, RankMessages* to_ranks) GS_REQUIRES(job.mutex_);

 private:
  // Moves to epoch `next` with `survivors` (ranks of the current epoch, in
  // order: a survivor's new rank is its index): fails what is in flight
  // (retriable), renumbers the local sessions (a local session left out is
  // refused), records the change and, with `announce`, tells each local
  // rank its place. `admitted`: joiners of this node becoming ranks
  // (numbered after the survivors); `size_after`: the job's new size (all
  // nodes).
  void enterEpochLocked(Job& job, uint64_t next, const std::vector<int>& survivors, const Admitted& admitted,
                        int size_after, int size_before, const std::string& cause, RankMessages* to_ranks,
                        bool announce) GS_REQUIRES(job.mutex_);
  // Applies the leader's `change` here. Returns the ranks admitted for
  // joiners of this node that have left meanwhile.
  std::vector<int> applyNewEpochLocked(Job& job, const v1::NewEpoch& change, RankMessages* to_ranks)
      GS_REQUIRES(job.mutex_);
  // Followers: joiners whose stream opened are reported to the leader.
  void reportJoiners() GS_EXCLUDES(job_.mutex_);

  Job& job_;
  StoppedRanks stopped_{kStoppedRankLimit};
};

}  // namespace gradsync::server
