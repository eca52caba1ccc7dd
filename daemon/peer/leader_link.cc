// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_link.h"

#include <chrono>

namespace gradsync::peer {
namespace {

int64_t steadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

LeaderLink::LeaderLink(std::shared_ptr<grpc::ChannelCredentials> credentials)
    : credentials_(credentials ? std::move(credentials) : grpc::InsecureChannelCredentials()) {}

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
  MutexLock lock(mutex_);
  stream_.reset();  // before its context
  context_ = std::make_unique<grpc::ClientContext>();
  stream_ = stub->Coordinate(context_.get());
  stream_->Write(hello);
  for (const auto& m : backlog_) stream_->Write(m);
  backlog_.clear();
}

grpc::Status LeaderLink::read(const std::function<void(const v1::LeaderMessage&)>& on_message) {
  grpc::ClientReaderWriter<v1::FollowerMessage, v1::LeaderMessage>* stream;
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
  const grpc::Status status = stream->Finish();
  MutexLock lock(mutex_);
  stream_.reset();
  return status;
}

bool LeaderLink::write(const v1::FollowerMessage& message) {
  MutexLock lock(mutex_);
  if (!stream_) {
    backlog_.push_back(message);
    return true;
  }
  return stream_->Write(message);
}

bool LeaderLink::isOpen() const {
  MutexLock lock(mutex_);
  return stream_ != nullptr;
}

void LeaderLink::writesDone() {
  MutexLock lock(mutex_);
  if (stream_) stream_->WritesDone();
}

void LeaderLink::cancel() {
  MutexLock lock(mutex_);
  if (stream_) context_->TryCancel();
}

}  // namespace gradsync::peer
