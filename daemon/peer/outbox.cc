// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/outbox.h"

namespace gradsync::peer {

SharedMessage share(v1::LeaderMessage message) {
  SharedMessage shared;
  shared.bytes = message.ByteSizeLong();
  shared.message = std::make_shared<const v1::LeaderMessage>(std::move(message));
  return shared;
}

Outbox::Push Outbox::push(const SharedMessage& message) {
  MutexLock lock(mutex_);
  if (closed_) return Push::kClosed;
  if (queue_.size() + 1 > limits_.messages || bytes_ + message.bytes > limits_.bytes) {
    overflow_ = std::to_string(queue_.size() + 1) + " messages (" + std::to_string((bytes_ + message.bytes) >> 10) +
                " KiB) waited, more than the " + std::to_string(limits_.messages) + " messages or " +
                std::to_string(limits_.bytes >> 20) + " MiB a follower may let wait";
    closed_ = true;
    finishing_ = true;
    cancelling_ = true;
    // Only the message in flight stays (the stream may still take it).
    while (queue_.size() > (writing_ ? 1u : 0u)) {
      bytes_ -= queue_.back().bytes;
      queue_.pop_back();
    }
    return Push::kOverflow;
  }
  queue_.push_back(message);
  bytes_ += message.bytes;
  if (writing_) return Push::kQueued;
  writing_ = true;
  return Push::kWriteFront;
}

const v1::LeaderMessage* Outbox::front() const {
  MutexLock lock(mutex_);
  return queue_.empty() ? nullptr : queue_.front().message.get();
}

Outbox::AfterWrite Outbox::written(bool ok) {
  MutexLock lock(mutex_);
  if (!queue_.empty()) {
    bytes_ -= queue_.front().bytes;
    queue_.pop_front();
  }
  if (!ok) {
    closed_ = true;
    queue_.clear();
    bytes_ = 0;
  }
  AfterWrite after;
  if (queue_.empty()) {
    writing_ = false;
    after.finish = finishNowLocked();
  } else {
    after.next = queue_.front().message.get();
  }
  return after;
}

bool Outbox::closeWhenWritten() {
  MutexLock lock(mutex_);
  closed_ = true;
  finishing_ = true;
  return finishNowLocked();
}

bool Outbox::cancelled() {
  MutexLock lock(mutex_);
  cancelling_ = false;
  return finishNowLocked();
}

bool Outbox::finishNowLocked() {
  if (!finishing_ || finished_ || writing_ || cancelling_) return false;
  finished_ = true;
  return true;
}

std::string Outbox::overflow() const {
  MutexLock lock(mutex_);
  return overflow_;
}

}  // namespace gradsync::peer
