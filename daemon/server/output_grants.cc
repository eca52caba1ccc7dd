// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/output_grants.h"

#include <algorithm>

#include "daemon/coordinator/request.h"

namespace gradsync::server {

Status OutputGrants::begin(const std::string& tensor, const std::vector<Ask>& asks, uint64_t epoch,
                           bool ends_at_failure, Clock::time_point now) {
  MutexLock lock(mutex_);
  RETURN_IF_ERROR(endedLocked(asks, epoch, ends_at_failure));
  Wait wait{tensor, now, {}};
  for (const Ask& ask : asks) {
    wait.keys.emplace_back(ask.rank, ask.handle);
    expected_.insert(wait.keys.back());
  }
  wait_ = std::move(wait);
  return okStatus();
}

bool OutputGrants::deliver(int rank, uint64_t handle, const v1::OutputGrant& grant) {
  MutexLock lock(mutex_);
  const Key key(rank, handle);
  if (expected_.erase(key) == 0) return false;
  granted_[key] = grant;
  cv_.notify_all();
  return true;
}

Status OutputGrants::endedLocked(const std::vector<Ask>& asks, uint64_t epoch, bool ends_at_failure) const {
  if (ends_at_failure && !failure_.empty()) return aborted(failure_);
  if (stopping_) return unavailable("job stopping");
  if (epoch_ != epoch) return aborted("the elastic job moved to epoch " + std::to_string(epoch_));
  for (const Ask& ask : asks) {
    auto left = left_.find(ask.session);
    if (left != left_.end()) return aborted(left->second + " before answering the output request");
  }
  return okStatus();
}

StatusOr<std::vector<v1::OutputGrant>> OutputGrants::await(const std::vector<Ask>& asks, uint64_t epoch,
                                                           bool ends_at_failure, Clock::duration timeout,
                                                           const std::string& prefix) {
  MutexLock lock(mutex_);
  Status ended = okStatus();
  const bool granted = cv_.wait_for(lock, timeout, [&]() GS_REQUIRES(mutex_) {
    ended = endedLocked(asks, epoch, ends_at_failure);
    return !ended.isOk() || std::all_of(asks.begin(), asks.end(), [&](const Ask& ask) GS_REQUIRES(mutex_) {
      return granted_.count({ask.rank, ask.handle}) > 0;
    });
  });
  wait_.reset();
  std::vector<v1::OutputGrant> answers;
  std::vector<int> waiting;
  for (const Ask& ask : asks) {
    auto it = granted_.find({ask.rank, ask.handle});
    if (it != granted_.end()) {
      answers.push_back(it->second);
      granted_.erase(it);
    } else {
      waiting.push_back(ask.rank);
    }
    expected_.erase({ask.rank, ask.handle});
  }
  if (!ended.isOk()) return Status(ended.code(), prefix + ended.message());
  if (!granted || !waiting.empty()) {
    return deadlineExceeded(prefix + "ranks " + coordinator::ranksString(waiting) +
                            " did not answer the output request within " +
                            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) + " s");
  }
  return answers;
}

void OutputGrants::sessionLeft(uint64_t session, const std::string& cause) {
  MutexLock lock(mutex_);
  left_.emplace(session, cause);
  cv_.notify_all();
}

void OutputGrants::failed(const std::string& failure) {
  MutexLock lock(mutex_);
  if (failure_.empty()) failure_ = failure;
  cv_.notify_all();
}

void OutputGrants::stopping() {
  MutexLock lock(mutex_);
  stopping_ = true;
  cv_.notify_all();
}

void OutputGrants::newEpoch(uint64_t epoch) {
  MutexLock lock(mutex_);
  epoch_ = epoch;
  expected_.clear();
  granted_.clear();
  left_.clear();  // the new epoch's sessions are those that stayed
  cv_.notify_all();
}

void OutputGrants::describe(Clock::time_point now, v1::JobTensors* out) const {
  MutexLock lock(mutex_);
  if (!wait_) return;
  v1::TensorAwaitingOutput* tensor = out->add_awaiting_output();
  tensor->set_name(wait_->tensor);
  tensor->set_age_seconds(std::chrono::duration<double>(now - wait_->since).count());
  for (const auto& key : wait_->keys) {
    if (granted_.count(key)) {
      tensor->add_granted_ranks(key.first);
    } else {
      tensor->add_waiting_ranks(key.first);
    }
  }
}

StatusOr<uint8_t*> OutputGrants::pointer(const std::string& who, const handoff::ShmArena* arena,
                                         const v1::OutputGrant& grant, uint64_t expected) {
  if (!grant.error().empty()) {
    return resourceExhausted(who + " could not reserve " + std::to_string(expected) +
                             " bytes of output: " + grant.error());
  }
  if (grant.length() != expected) {
    return invalidArgument(who + " granted " + std::to_string(grant.length()) + " bytes of output, " +
                           std::to_string(expected) + " were requested");
  }
  if (arena == nullptr) return failedPrecondition(who + " has no arena");
  return arena->range(grant.offset(), grant.length());
}

}  // namespace gradsync::server
