// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/ring_reader.h"

#include "daemon/common/logging.h"

namespace gradsync::server {

RingReader::RingReader(std::shared_ptr<Session> session, OnEnqueue on_enqueue, OnViolation on_violation)
    : session_(std::move(session)), on_enqueue_(std::move(on_enqueue)), on_violation_(std::move(on_violation)) {
  if (session_->submitRing() != nullptr) thread_ = std::thread([this] { loop(); });
}

RingReader::~RingReader() {
  stop_.store(true);
  if (thread_.joinable()) {
    handoff::RingConsumer::wakeAll(session_->submitIndices());
    thread_.join();
  }
}

void RingReader::loop() {
  handoff::RingConsumer& ring = *session_->submitRing();
  std::string bytes;
  v1::Enqueue enqueue;
  while (!stop_.load()) {
    bool got = false;
    Status status = ring.pop(&bytes, &got);
    if (!status.isOk()) {
      on_violation_("corrupt submission ring: " + status.message());
      return;
    }
    if (!got) {
      ring.wait(std::chrono::milliseconds(200));
      continue;
    }
    if (!enqueue.ParseFromString(bytes)) {
      on_violation_("unparsable message in the submission ring");
      return;
    }
    on_enqueue_(enqueue);
  }
}

}  // namespace gradsync::server
