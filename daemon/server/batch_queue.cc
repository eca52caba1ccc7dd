// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/batch_queue.h"

#include <algorithm>

namespace gradsync::server {

void BatchQueue::addReady(std::vector<coordinator::Response> responses) {
  for (auto& r : responses) ready_.push_back(std::move(r));
}

uint64_t BatchQueue::bytesReady() const {
  uint64_t bytes = 0;
  for (const auto& r : ready_) bytes += r.first().length;
  return bytes;
}

void BatchQueue::addRemote(Batch batch) { remote_.push_back(std::move(batch)); }

std::vector<coordinator::Response> BatchQueue::takeReady() {
  std::vector<coordinator::Response> batch;
  for (auto& r : ready_) batch.push_back(std::move(r));
  ready_.clear();
  return batch;
}

void BatchQueue::begin(size_t responses) {
  executing_ = true;
  executing_count_ = static_cast<int>(responses);
}

BatchQueue::Batch BatchQueue::next(bool lead) {
  Batch batch;
  if (!remote_.empty()) {  // follower: the leader's batches, in order
    batch.sequence = remote_.front().sequence;
    batch.fusion_threshold_bytes = remote_.front().fusion_threshold_bytes;
    for (auto& r : remote_.front().responses) ready_.push_back(std::move(r));
    remote_.pop_front();
  } else if (lead) {
    batch.sequence = ++sequence_;
    batch.lead = true;
  }
  batch.responses = takeReady();
  begin(batch.responses.size());
  return batch;
}

BatchQueue::Batch BatchQueue::nextLed() {
  Batch batch;
  if (!ready_.empty()) {
    batch.sequence = ++sequence_;
    batch.lead = true;
    batch.responses = takeReady();
    begin(batch.responses.size());
  }
  return batch;
}

std::vector<coordinator::Response> BatchQueue::takeErrors() {
  std::vector<coordinator::Response> errors;
  while (!remote_.empty() && remote_.front().sequence == 0) {
    for (auto& r : remote_.front().responses) errors.push_back(std::move(r));
    remote_.pop_front();
  }
  if (!errors.empty()) begin(errors.size());
  return errors;
}

std::optional<BatchQueue::Batch> BatchQueue::takeRemoteUpTo(uint64_t sequence) {
  if (remote_.empty() || remote_.front().sequence > sequence) return std::nullopt;
  Batch batch = std::move(remote_.front());
  remote_.pop_front();
  seen_ = std::max(seen_, batch.sequence);
  begin(batch.responses.size());
  return batch;
}

bool BatchQueue::reached(uint64_t sequence) const {
  return seen_ >= sequence || (!remote_.empty() && remote_.front().sequence <= sequence);
}

std::vector<coordinator::Response> BatchQueue::takeAllWaiting() {
  remote_.clear();
  return takeReady();
}

}  // namespace gradsync::server
