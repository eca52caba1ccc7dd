// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/session.h"

namespace gradsync::server {

bool Session::secretMatches(const uint8_t* secret, size_t len) const {
  if (len != secret_.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < len; ++i) diff |= static_cast<uint8_t>(secret[i] ^ secret_[i]);
  return diff == 0;
}

Status Session::attachArena(std::unique_ptr<handoff::ShmArena> arena, int64_t pid) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (arena_) return failedPrecondition("session " + std::to_string(id_) + " already has an arena");
  arena_ = std::move(arena);
  pid_ = pid;
  auto control = arena_->range(0, sizeof(handoff::ArenaControl));
  if (control.isOk() && arena_->size() >= handoff::kControlBytes) {
    auto* block = reinterpret_cast<handoff::ArenaControl*>(*control);
    // Read once: the client could change it later; only the rings' indices
    // are re-read, and those are checked on every use.
    if (reinterpret_cast<volatile uint32_t&>(block->magic) == handoff::kRingMagic) {
      control_ = block;
      submit_ring_ = std::make_unique<handoff::RingConsumer>(&block->submit, block->submit_slots);
      std::lock_guard<std::mutex> write_lock(write_mutex_);
      complete_ring_ = std::make_unique<handoff::RingProducer>(&block->complete, block->complete_slots);
    }
  }
  return okStatus();
}

const handoff::ShmArena* Session::arena() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return arena_.get();
}

int64_t Session::pid() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pid_;
}

bool Session::attachStream(SessionStream* stream) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (stream_ != nullptr) return false;
  stream_ = stream;
  stream_attached_.store(true);
  return true;
}

void Session::detachStream() {
  std::lock_guard<std::mutex> lock(write_mutex_);
  stream_ = nullptr;
  stream_attached_.store(false);
}

bool Session::streamAttached() const { return stream_attached_.load(); }

bool Session::send(const v1::DaemonMessage& message) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (complete_ring_ && message.has_done() && stream_ != nullptr) {
    if (complete_ring_->push(message.done().SerializeAsString())) return true;
  }
  if (stream_ == nullptr) return false;
  return stream_->Write(message);
}

std::string Session::describe() const {
  int64_t pid = this->pid();
  std::string s = "rank " + std::to_string(identity_.rank) + " (";
  s += pid > 0 ? "pid " + std::to_string(pid) : std::string("pid unknown");
  if (!identity_.hostname.empty()) s += ", host " + identity_.hostname;
  return s + ")";
}

bool Session::addHandle(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  return handles_.insert(handle).second;
}

void Session::removeHandle(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.erase(handle);
}

}  // namespace gradsync::server
