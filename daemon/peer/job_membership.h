// SPDX-License-Identifier: Apache-2.0
// A job's membership across daemons as this node holds it, under one lock:
// the members of each epoch (EpochBook: forming, renumbering, joiners,
// candidates, removed nodes), the id of the daemons' NCCL communicator of
// the current epoch, and whether the job stopped or its transfers were
// ended here; with a wait for the job to form or change.
//
// Queries and single steps take the lock themselves. The leader's side
// holds it over steps that change the membership together with its own
// parts (an epoch, its NCCL id and the followers' streams placed in it),
// through mutex() and the ...Locked methods; the parts' own locks are taken
// under it, never the other way.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "daemon/membership/epoch_book.h"
#include "daemon/peer/node_endpoints.h"
#include "daemon/peer/node_side.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class JobMembership {
 public:
  // Makes the NCCL id of an epoch (empty function: no NCCL here).
  using MakeNcclId = std::function<StatusOr<std::string>()>;
  // Ends this node's transfers with a reason (called under the lock, so
  // that an epoch's end is ordered with the transfers entering the next).
  using EndTransfers = std::function<void(const std::string& reason)>;
  JobMembership(std::string job_id, std::string self_address, int min_size, MakeNcclId make_nccl_id,
                EndTransfers end_transfers);

  // The lock of the steps a side takes together with its own parts.
  Mutex& mutex() const GS_RETURN_CAPABILITY(mutex_) { return mutex_; }
  membership::EpochBook& bookLocked() GS_REQUIRES(mutex_) { return book_; }
  const membership::EpochBook& bookLocked() const GS_REQUIRES(mutex_) { return book_; }
  bool stoppingLocked() const GS_REQUIRES(mutex_) { return stopping_; }
  // Why the transfers were ended (empty: they were not).
  const std::string& transfersEndedLocked() const GS_REQUIRES(mutex_) { return transfers_ended_; }
  // The wait for a change (formed, a new epoch, a follower attached, the
  // job stopped or its transfers ended): wait on it with mutex() held.
  CondVar& changed() const { return changed_; }
  void notifyChanged() const { changed_.notify_all(); }

  // The NCCL id of the current epoch: made anew (every member has GPUs and
  // NCCL), cleared (an epoch below the minimum runs nothing), or as the
  // leader made it (a follower).
  const std::string& ncclIdLocked() const GS_REQUIRES(mutex_) { return nccl_id_; }
  void makeNcclIdLocked() GS_REQUIRES(mutex_);
  void setNcclIdLocked(std::string id) GS_REQUIRES(mutex_) { nccl_id_ = std::move(id); }
  // This node's transfers of the epoch before the current one end now
  // (unless the job's end ended them already, with its reason).
  void endOldEpochTransfersLocked() GS_REQUIRES(mutex_);
  // OK while collectives of `epoch` may run (NodeEndpoints::epochRuns).
  Status epochRunsLocked(uint64_t epoch) const GS_REQUIRES(mutex_);
  // Formed, or nothing will form (stopped, transfers ended).
  bool formedOrEndedLocked() const GS_REQUIRES(mutex_) {
    return book_.formed() || stopping_ || !transfers_ended_.empty();
  }

  // A follower joined: `members` of `epoch` (a candidate: the running
  // job's, not a member yet) and the leader's NCCL id.
  void joined(std::vector<v1::NodeInfo> members, uint64_t epoch, const std::string& nccl_id) GS_EXCLUDES(mutex_);
  // The job stops here: nothing forms or changes any more.
  void stop() GS_EXCLUDES(mutex_);
  // Ends this node's transfers now and from now on with `reason` (the
  // first reason stays).
  void endTransfers(const std::string& reason) GS_EXCLUDES(mutex_);

  bool formed() const GS_EXCLUDES(mutex_);
  bool stopping() const GS_EXCLUDES(mutex_);
  // Why nothing runs any more ("stopped", or why the transfers ended);
  // empty while the job runs.
  std::string ended() const GS_EXCLUDES(mutex_);
  // Waits until the job formed (true), stopped, its transfers ended, or
  // `deadline` passed.
  bool waitFormed(CrossClock::time_point deadline) GS_EXCLUDES(mutex_);
  uint64_t epoch() const GS_EXCLUDES(mutex_);
  std::vector<v1::NodeInfo> members(uint64_t* epoch = nullptr) const GS_EXCLUDES(mutex_);
  // The current epoch's members, counted (and that epoch, where asked).
  size_t memberCount(uint64_t* epoch = nullptr) const GS_EXCLUDES(mutex_);
  bool isMember(const std::string& peer_address) const GS_EXCLUDES(mutex_);
  // Once formed: whether every member offered `what` (a NodeInfo flag).
  bool everyMemberOffers(bool (v1::NodeInfo::*what)() const) const GS_EXCLUDES(mutex_);
  Status epochRuns(uint64_t epoch) const GS_EXCLUDES(mutex_);
  // This node's place as `side` sees it, and the NCCL id with it.
  int crossRank(const NodeSide& side) const GS_EXCLUDES(mutex_);
  NodeEndpoints::NcclId ncclId(const NodeSide& side) const GS_EXCLUDES(mutex_);
  // Whether a follower reported a rank waiting to join (the leader).
  bool joinersWaiting() const GS_EXCLUDES(mutex_);
  // Whether the node at `peer_address` is still in the job (CheckMember).
  v1::CheckMemberResponse check(const std::string& peer_address) const GS_EXCLUDES(mutex_);
  // Whether an AbortJob from `from`, of `epoch`, may end the job here:
  // only from a node of the job (while it forms, a node that joined after
  // this one may not be known yet) and, in an elastic job, of the current
  // epoch.
  Status checkAbortNotice(const std::string& from, uint64_t epoch, bool elastic, const std::string& what) const
      GS_EXCLUDES(mutex_);

 private:
  const std::string job_id_;
  const MakeNcclId make_nccl_id_;
  const EndTransfers end_transfers_;
  mutable Mutex mutex_;
  mutable CondVar changed_;
  membership::EpochBook book_ GS_GUARDED_BY(mutex_);
  std::string nccl_id_ GS_GUARDED_BY(mutex_);
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
  std::string transfers_ended_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::peer
