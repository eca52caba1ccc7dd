// SPDX-License-Identifier: Apache-2.0
// Client: elastic jobs. The daemon announces a new epoch (MembershipChange)
// when a rank is lost; this rank takes up its new place only when the
// caller rejoins, so the collectives it starts before that belong to the
// old epoch and are refused as retriable, never paired with the new one's.
#include <chrono>

#include "client/src/client.h"

namespace gradsync::client {

Membership Client::membership() const {
  MutexLock lock(mutex_);
  return membership_;
}

void Client::onMembershipChange(const v1::MembershipChange& change) {
  MutexLock lock(mutex_);
  if (change.refused()) {
    join_refused_ = change.cause();
    cv_.notify_all();
    return;
  }
  if (change.epoch() <= membership_.epoch || (next_membership_ && change.epoch() <= next_membership_->epoch)) return;
  next_membership_ = Membership{change.epoch(), change.rank(), change.size(), change.local_rank(), change.local_size()};
  cv_.notify_all();
}

StatusOr<Membership> Client::rejoin(double timeout_seconds) {
  MutexLock lock(mutex_);
  if (!options_.elastic) return failedPrecondition("the job is not elastic (GRADSYNC_ELASTIC): nothing to rejoin");
  const auto ready = [&]() GS_REQUIRES(mutex_) {
    return next_membership_.has_value() || !join_refused_.empty() || !broken_.isOk() || shut_down_;
  };
  if (timeout_seconds > 0) {
    const auto limit =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(timeout_seconds));
    if (!cv_.wait_for(lock, limit, ready)) {
      return deadlineExceeded("no new epoch of elastic job '" + options_.job_id + "' within " +
                              std::to_string(timeout_seconds) + " s");
    }
  } else {
    cv_.wait(lock, ready);
  }
  if (!next_membership_) {
    if (!join_refused_.empty()) return failedPrecondition(join_refused_);
    return broken_.isOk() ? failedPrecondition("client is shut down") : broken_;
  }
  membership_ = *next_membership_;
  next_membership_.reset();
  // The new epoch's collectives pair up afresh on every rank.
  next_barrier_ = 1;
  next_set_change_ = 0;
  next_commit_ = 0;
  std::vector<int> all(membership_.size);
  for (int i = 0; i < membership_.size; ++i) all[i] = i;
  process_sets_.clear();
  process_sets_.emplace(0, std::move(all));
  return membership_;
}

bool Client::membershipChanged(uint64_t handle) {
  MutexLock lock(mutex_);
  auto it = ops_.find(handle);
  return it != ops_.end() && it->second->membership_changed;
}

StatusOr<bool> Client::commitBarrier(double timeout_seconds, bool* retriable) {
  *retriable = false;
  OpSpec spec;
  spec.type = v1::BARRIER;
  spec.commit = true;
  {
    MutexLock lock(mutex_);
    spec.name = "elastic.commit." + std::to_string(next_commit_++);
  }
  ASSIGN_OR_RETURN(uint64_t handle, enqueue(spec));
  bool changed = false;
  RETURN_IF_ERROR(
      finishBlocking(handle, timeout_seconds, "commit barrier '" + spec.name + "'", [&](const Operation& op) {
        changed = op.epoch_changed;
        *retriable = op.membership_changed;
      }));
  return changed;
}

Status Client::finishBlocking(uint64_t handle, double timeout_seconds, const std::string& what,
                              const std::function<void(const Operation&)>& read) {
  Status waited = wait(handle, timeout_seconds);
  if (waited.code() == StatusCode::kDeadlineExceeded) {
    auto done = poll(handle);
    if (!done.isOk() || !*done) return Status(waited.code(), what + ": " + waited.message());
  }
  {
    MutexLock lock(mutex_);
    auto it = ops_.find(handle);
    if (it != ops_.end()) read(*it->second);
  }
  (void)release(handle);
  return waited;
}

}  // namespace gradsync::client
