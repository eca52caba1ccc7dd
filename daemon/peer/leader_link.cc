// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_link.h"

#include <chrono>

#include "daemon/peer/request_batch.h"

namespace gradsync::peer {
namespace {

int64_t steadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

LeaderLink::LeaderLink(std::shared_ptr<grpc::ChannelCredentials> credentials, std::function<void(size_t)> written)
    : credentials_(credentials ? std::move(credentials) : grpc::InsecureChannelCredentials()),
      written_(std::move(written)) {}

LeaderLink::~LeaderLink() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
    // A write stuck on a leader that reads no more ends. Only while the
    // stream lives: an ended call's context must not be cancelled.
    if (stream_) context_->TryCancel();
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void LeaderLink::connect(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);     // a silent leader is noticed
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);  // within about 4 s
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  channel_ = grpc::CreateCustomChannel(address, credentials_, args);
  address_ = address;
}

void LeaderLink::open(const v1::FollowerMessage& hello) {
  heard_ms_ = steadyNowMs();
  auto stub = v1::Peer::NewStub(channel_);
  {
    MutexLock lock(mutex_);
    // The old stream ended in read(), which waited for its last write.
    stream_.reset();  // before its context
    context_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub->Coordinate(context_.get());
    queue_.push_front(hello);  // before what waited
    if (!writer_.joinable()) writer_ = std::thread([this] { writeLoop(); });
  }
  cv_.notify_all();
}

grpc::Status LeaderLink::read(const std::function<void(const v1::LeaderMessage&)>& on_message) {
  Stream* stream;
  {
    MutexLock lock(mutex_);
    stream = stream_.get();  // replaced or dropped only on this thread
  }
  if (stream == nullptr) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no stream to the leader");
  heard_ms_ = steadyNowMs();
  v1::LeaderMessage message;
  while (stream->Read(&message)) {
    heard_ms_ = steadyNowMs();
    on_message(message);
  }
  std::unique_ptr<Stream> ended;
  {
    // The call is over (the leader finished it, or it broke): a write in
    // progress fails at once (not cancelled here: that could turn the
    // leader's OK into CANCELLED). From now on writes wait for the next
    // stream, and none runs beside Finish.
    MutexLock lock(mutex_);
    cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return !writing_; });
    ended = std::move(stream_);
  }
  return ended->Finish();  // its context lives until the next open()
}

void LeaderLink::write(v1::FollowerMessage message) {
  MutexLock lock(mutex_);
  if (stopping_) return;
  if (stream_ && !writing_ && queue_.empty() && !writes_done_) {
    // Nothing in flight or waiting: written here at once (no hand-over to
    // the writer, whose wake-up would add to every message's latency).
    // What queues meanwhile, the writer sends after it, merged.
    Stream* stream = stream_.get();
    writing_ = true;
    lock.unlock();
    const size_t bytes = message.ByteSizeLong();
    if (stream->Write(message) && written_) written_(bytes);
    lock.lock();
    writing_ = false;
    cv_.notify_all();
    return;
  }
  queue_.push_back(std::move(message));
  cv_.notify_all();
}

bool LeaderLink::isOpen() const {
  MutexLock lock(mutex_);
  return stream_ != nullptr;
}

void LeaderLink::writesDone() {
  {
    MutexLock lock(mutex_);
    writes_done_ = true;
  }
  cv_.notify_all();
}

void LeaderLink::cancel() {
  MutexLock lock(mutex_);
  if (stream_) context_->TryCancel();
}

std::vector<v1::FollowerMessage> LeaderLink::takeMergedLocked() {
  std::vector<v1::FollowerMessage> out;
  RequestBatch batch;
  const auto close = [&] {
    if (!batch.empty()) out.push_back(batch.take());
  };
  for (auto& message : queue_) {
    if (!message.has_request()) {
      close();
      out.push_back(std::move(message));
      continue;
    }
    if (batch.bytes() + message.request().ByteSizeLong() > kMergedBytes) close();
    batch.add(std::move(*message.mutable_request()));
  }
  close();
  queue_.clear();
  return out;
}

void LeaderLink::writeLoop() {
  MutexLock lock(mutex_);
  bool done_sent = false;
  for (;;) {
    cv_.wait(lock, [&]() GS_REQUIRES(mutex_) {
      return stopping_ || (stream_ && !writing_ && (!queue_.empty() || (writes_done_ && !done_sent)));
    });
    if (stopping_) return;
    if (done_sent) {  // nothing is written after the end (a heartbeat of the last second)
      queue_.clear();
      continue;
    }
    std::vector<v1::FollowerMessage> batch = takeMergedLocked();
    const bool end = writes_done_;
    Stream* stream = stream_.get();
    writing_ = true;
    lock.unlock();
    bool ok = true;
    for (const auto& message : batch) {
      ok = ok && stream->Write(message);  // after a failure, the rest is lost with the stream
      if (ok && written_) written_(message.ByteSizeLong());
    }
    if (ok && end && !done_sent) done_sent = stream->WritesDone();
    lock.lock();
    writing_ = false;
    cv_.notify_all();
    if (!ok) done_sent = false;  // the next stream (a new leader) starts afresh
  }
}

}  // namespace gradsync::peer
