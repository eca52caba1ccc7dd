// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/session.h"

#include <fstream>

namespace gradsync::server {

bool Session::secretMatches(const uint8_t* secret, size_t len) const {
  if (len != secret_.size()) return false;
  uint8_t diff = 0;
  for (size_t i = 0; i < len; ++i) diff |= static_cast<uint8_t>(secret[i] ^ secret_[i]);
  return diff == 0;
}

Status Session::attachArena(std::unique_ptr<handoff::ShmArena> arena, Budget::Lease lease, int64_t pid) {
  MutexLock lock(mutex_);
  if (arena_) return failedPrecondition("session " + std::to_string(id_) + " already has an arena");
  arena_ = std::move(arena);
  arena_lease_ = std::move(lease);
  pid_ = pid;
  auto control = arena_->range(0, sizeof(handoff::ArenaControl));
  if (control.isOk() && arena_->size() >= handoff::kControlBytes) {
    auto* block = reinterpret_cast<handoff::ArenaControl*>(*control);
    // Read once: the client could change it later; only the rings' indices
    // are re-read, and those are checked on every use.
    if (reinterpret_cast<volatile uint32_t&>(block->magic) == handoff::kRingMagic) {
      control_ = block;
      submit_ring_ = std::make_unique<handoff::RingConsumer>(&block->submit, block->submit_slots);
      MutexLock write_lock(write_mutex_);
      complete_ring_ = std::make_unique<handoff::RingProducer>(&block->complete, block->complete_slots);
    }
  }
  return okStatus();
}

Status Session::attachGpu(std::shared_ptr<gpu::ClientGpu> gpu) {
  MutexLock lock(mutex_);
  if (gpu_) return failedPrecondition("rank " + std::to_string(rank()) + " attached its GPU already");
  gpu_ = std::move(gpu);
  return okStatus();
}

std::shared_ptr<gpu::ClientGpu> Session::gpu() const {
  MutexLock lock(mutex_);
  return gpu_;
}

void Session::releaseGpu() {
  std::shared_ptr<gpu::ClientGpu> gone;
  {
    MutexLock lock(mutex_);
    gone = std::move(gpu_);
  }
  if (gone) gone->detach();
  // `gone` goes here, outside the lock (unless an executor still holds it):
  // its mappings pass to the reaper, which unmaps each after its last work.
}

const handoff::ShmArena* Session::arena() const {
  MutexLock lock(mutex_);
  return arena_.get();
}

int64_t Session::pid() const {
  MutexLock lock(mutex_);
  return pid_;
}

bool Session::attachStream(SessionWriter* stream, grpc::ServerContext* context) {
  MutexLock lock(write_mutex_);
  if (stream_ != nullptr || writer_.joinable()) return false;
  stream_ = stream;
  context_ = context;
  writer_stop_ = writer_done_ = false;
  stream_attached_.store(true);
  writer_ = std::thread([this] { writerLoop(); });
  return true;
}

void Session::writerLoop() {
  for (;;) {
    v1::DaemonMessage message;
    {
      MutexLock lock(write_mutex_);
      write_cv_.wait(lock, [&]() GS_REQUIRES(write_mutex_) { return writer_stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, everything written
      message = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!stream_->Write(message)) break;  // the call ended
  }
  MutexLock lock(write_mutex_);
  queue_.clear();
  writer_done_ = true;
  write_cv_.notify_all();
}

void Session::detachStream() {
  MutexLock lock(write_mutex_);
  if (!writer_.joinable()) return;
  writer_stop_ = true;
  stream_attached_.store(false);
  write_cv_.notify_all();
  if (!write_cv_.wait_for(lock, std::chrono::seconds(1), [&]() GS_REQUIRES(write_mutex_) { return writer_done_; })) {
    if (context_ != nullptr) context_->TryCancel();  // the client does not read: unblock the writer
  }
  lock.unlock();
  writer_.join();
  lock.lock();
  stream_ = nullptr;
  context_ = nullptr;
}

bool Session::streamAttached() const { return stream_attached_.load(); }

void Session::cancel() {
  MutexLock lock(write_mutex_);
  if (context_ != nullptr) context_->TryCancel();
}

bool Session::processStopped() const {
  const int64_t process = pid();
  if (process <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(process) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold any).
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'T' || line[paren + 2] == 't');
}

bool Session::send(const v1::DaemonMessage& message) {
  MutexLock lock(write_mutex_);
  if (stream_ == nullptr || writer_stop_ || writer_done_) return false;
  if (first_error_.empty() && message.has_done() && message.done().code() != 0) {
    first_error_ = message.done().message();
  }
  if (complete_ring_ && message.has_done()) {
    if (complete_ring_->push(message.done().SerializeAsString())) return true;
  }
  if (queue_.size() >= max_queued_) {
    // The client stopped reading its stream: end its session rather than
    // let the queue grow.
    if (context_ != nullptr) context_->TryCancel();
    return false;
  }
  queue_.push_back(message);
  write_cv_.notify_all();
  return true;
}

std::string Session::firstError() const {
  MutexLock lock(write_mutex_);
  return first_error_;
}

std::string Session::describe() const {
  int64_t pid = this->pid();
  // A joiner has no rank until a commit admits it.
  std::string s = rank() >= 0 ? "rank " + std::to_string(rank()) + " (" : std::string("a joining rank (");
  s += pid > 0 ? "pid " + std::to_string(pid) : std::string("pid unknown");
  if (!identity_.hostname.empty()) s += ", host " + identity_.hostname;
  return s + ")";
}

bool Session::addHandle(uint64_t handle) {
  MutexLock lock(mutex_);
  return handles_.insert(handle).second;
}

size_t Session::handlesInFlight() const {
  MutexLock lock(mutex_);
  return handles_.size();
}

void Session::removeHandle(uint64_t handle) {
  MutexLock lock(mutex_);
  handles_.erase(handle);
}

}  // namespace gradsync::server
