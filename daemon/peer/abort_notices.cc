// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/abort_notices.h"

namespace gradsync::peer {

std::shared_ptr<AbortNotices> AbortNotices::send(v1::AbortJobRequest request, const std::vector<std::string>& addresses,
                                                 const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  auto notices = std::make_shared<AbortNotices>();
  notices->request_ = std::move(request);
  for (const auto& address : addresses) {
    auto call = std::make_unique<Call>();
    call->stub =
        v1::Peer::NewStub(grpc::CreateChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials()));
    call->context.set_deadline(std::chrono::system_clock::now() + kDeadline);
    notices->calls_.push_back(std::move(call));
  }
  // The callbacks hold no reference: the last one must never go on a
  // callback's thread, where the calls' contexts and channels would be
  // destroyed inside their own completion (the destructor waits instead).
  AbortNotices* self = notices.get();
  for (auto& call : notices->calls_) {
    call->stub->async()->AbortJob(&call->context, &notices->request_, &call->response, [self](grpc::Status) {
      MutexLock lock(self->mutex_);
      ++self->done_;
      self->done_cv_.notify_all();
    });
  }
  return notices;
}

AbortNotices::~AbortNotices() { wait(); }

std::vector<size_t> AbortNotices::relaysOf(size_t self, size_t followers) {
  std::vector<size_t> relays;
  for (size_t offset = 1; offset < followers; offset *= 2) relays.push_back((self + offset) % followers);
  return relays;
}

void AbortNotices::wait() {
  MutexLock lock(mutex_);
  done_cv_.wait(lock, [&]() GS_REQUIRES(mutex_) { return done_ == calls_.size(); });  // each call has a deadline
}

}  // namespace gradsync::peer
