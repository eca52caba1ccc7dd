// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/awaiting_leader.h"

namespace gradsync::server {

bool AwaitingLeader::holdUntilStarted(const std::shared_ptr<Session>& session, coordinator::Request& request) {
  MutexLock lock(mutex_);
  if (started_) return false;
  early_.emplace_back(session, std::move(request));
  return true;
}

std::vector<AwaitingLeader::Early> AwaitingLeader::start() {
  MutexLock lock(mutex_);
  started_ = true;
  return std::exchange(early_, {});
}

bool AwaitingLeader::started() const {
  MutexLock lock(mutex_);
  return started_;
}

void AwaitingLeader::forwarded(coordinator::Request request) {
  MutexLock lock(mutex_);
  const auto key = std::make_pair(request.rank, request.handle);
  forwarded_.emplace(key, std::move(request));
}

void AwaitingLeader::answered(int rank, uint64_t handle) {
  MutexLock lock(mutex_);
  forwarded_.erase(std::make_pair(rank, handle));
}

void AwaitingLeader::forgetLocked(const coordinator::Response& response) {
  for (const auto& request : response.requests) {
    if (request) forwarded_.erase(std::make_pair(request->rank, request->handle));
  }
}

void AwaitingLeader::batchStarts(const std::vector<coordinator::Response>& responses) {
  MutexLock lock(mutex_);
  if (forwarded_.empty()) return;
  for (const auto& response : responses) forgetLocked(response);
}

void AwaitingLeader::completed(const coordinator::Response& response) {
  MutexLock lock(mutex_);
  if (!forwarded_.empty()) forgetLocked(response);
}

size_t AwaitingLeader::forwardedCount() const {
  MutexLock lock(mutex_);
  return forwarded_.size();
}

std::vector<AwaitingLeader::Early> AwaitingLeader::takeEarly() {
  MutexLock lock(mutex_);
  return std::exchange(early_, {});
}

std::vector<coordinator::Request> AwaitingLeader::takeForwarded() {
  std::vector<coordinator::Request> taken;
  MutexLock lock(mutex_);
  for (auto& [key, request] : forwarded_) taken.push_back(std::move(request));
  forwarded_.clear();
  return taken;
}

}  // namespace gradsync::server
