// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/job_membership.h"

#include <algorithm>

#include "daemon/common/logging.h"

namespace gradsync::peer {

JobMembership::JobMembership(std::string job_id, std::string self_address, int min_size, MakeNcclId make_nccl_id,
                             EndTransfers end_transfers)
    : job_id_(std::move(job_id)),
      make_nccl_id_(std::move(make_nccl_id)),
      end_transfers_(std::move(end_transfers)),
      book_(job_id_, std::move(self_address), min_size) {}

void JobMembership::makeNcclIdLocked() {
  // Only for a job that will use it: NCCL's bootstrap root (a thread and a
  // listening socket) waits until the communicator forms, which a job with
  // a GPU-less node never does. An elastic job gets one with each epoch.
  nccl_id_.clear();
  const bool every_node_nccl = std::all_of(book_.members().begin(), book_.members().end(),
                                           [](const v1::NodeInfo& node) { return node.gpus() > 0 && node.nccl(); });
  if (!make_nccl_id_ || !every_node_nccl || book_.members().empty()) return;
  auto id = make_nccl_id_();
  if (!id.isOk()) {
    GS_LOG(control, warn, "job '{}': no NCCL id for the daemons' GPUs: {}", job_id_, id.status().message());
    return;
  }
  nccl_id_ = std::move(id).value();
}

void JobMembership::endOldEpochTransfersLocked() {
  // The next ring lifts it for the new epoch; a job that failed keeps its
  // reason.
  if (transfers_ended_.empty() && end_transfers_)
    end_transfers_("the job moved to epoch " + std::to_string(book_.epoch()));
}

Status JobMembership::epochRunsLocked(uint64_t epoch) const {
  if (stopping_) return cancelled("job '" + job_id_ + "' stopped");
  if (!transfers_ended_.empty()) return aborted("job '" + job_id_ + "': " + transfers_ended_);
  if (epoch != book_.epoch()) {
    return aborted("job '" + job_id_ + "': the membership changed (epoch " + std::to_string(epoch) +
                   " is over, the job is at epoch " + std::to_string(book_.epoch()) + ")");
  }
  return okStatus();
}

void JobMembership::joined(std::vector<v1::NodeInfo> members, uint64_t epoch, const std::string& nccl_id) {
  {
    MutexLock lock(mutex_);
    book_.form(std::move(members), std::max<uint64_t>(1, epoch));
    nccl_id_ = nccl_id;
  }
  changed_.notify_all();
}

void JobMembership::stop() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
}

void JobMembership::endTransfers(const std::string& reason) {
  {
    MutexLock lock(mutex_);
    if (transfers_ended_.empty()) transfers_ended_ = reason;
    if (end_transfers_) end_transfers_(reason);
  }
  changed_.notify_all();
}

bool JobMembership::formed() const {
  MutexLock lock(mutex_);
  return book_.formed();
}

bool JobMembership::stopping() const {
  MutexLock lock(mutex_);
  return stopping_;
}

std::string JobMembership::ended() const {
  MutexLock lock(mutex_);
  return stopping_ ? "stopped" : transfers_ended_;
}

bool JobMembership::waitFormed(CrossClock::time_point deadline) {
  MutexLock lock(mutex_);
  changed_.wait_until(lock, deadline, [&]() GS_REQUIRES(mutex_) { return formedOrEndedLocked(); });
  return book_.formed() && !stopping_ && transfers_ended_.empty();
}

uint64_t JobMembership::epoch() const {
  MutexLock lock(mutex_);
  return book_.epoch();
}

std::vector<v1::NodeInfo> JobMembership::members(uint64_t* epoch) const {
  MutexLock lock(mutex_);
  if (epoch != nullptr) *epoch = book_.epoch();
  return book_.members();
}

size_t JobMembership::memberCount(uint64_t* epoch) const {
  MutexLock lock(mutex_);
  if (epoch != nullptr) *epoch = book_.epoch();
  return book_.members().size();
}

bool JobMembership::isMember(const std::string& peer_address) const {
  MutexLock lock(mutex_);
  return book_.member(peer_address) != nullptr;
}

bool JobMembership::everyMemberOffers(bool (v1::NodeInfo::*what)() const) const {
  MutexLock lock(mutex_);
  return book_.formed() && std::all_of(book_.members().begin(), book_.members().end(),
                                       [&](const v1::NodeInfo& node) { return (node.*what)(); });
}

Status JobMembership::epochRuns(uint64_t epoch) const {
  MutexLock lock(mutex_);
  return epochRunsLocked(epoch);
}

int JobMembership::crossRank(const NodeSide& side) const {
  MutexLock lock(mutex_);
  return side.crossRank(book_);
}

NodeEndpoints::NcclId JobMembership::ncclId(const NodeSide& side) const {
  MutexLock lock(mutex_);
  return {nccl_id_, book_.epoch(), side.crossRank(book_)};
}

bool JobMembership::joinersWaiting() const {
  MutexLock lock(mutex_);
  return book_.joinerCount() > 0;
}

v1::CheckMemberResponse JobMembership::check(const std::string& peer_address) const {
  MutexLock lock(mutex_);
  return book_.check(peer_address);
}

Status JobMembership::checkAbortNotice(const std::string& from, uint64_t epoch, bool elastic,
                                       const std::string& what) const {
  MutexLock lock(mutex_);
  const bool member = book_.member(from) != nullptr;
  if (!elastic && !member && book_.formed()) {
    GS_LOG(control, warn, "job '{}': refused an abort notice from {}, not a node of the job", job_id_, from);
    return permissionDenied("job '" + job_id_ + "': " + from +
                            " is not a node of the job: its abort notice is refused");
  }
  if (elastic && (epoch != book_.epoch() || !member)) {
    GS_LOG(control, warn, "job '{}': refused a stale abort notice from {} (its epoch {}, this node's {}): {}", job_id_,
           from, epoch, book_.epoch(), what);
    return failedPrecondition("job '" + job_id_ + "' is at epoch " + std::to_string(book_.epoch()) + " without " +
                              from + ": its notice is stale");
  }
  return okStatus();
}

}  // namespace gradsync::peer
