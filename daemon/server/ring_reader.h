// SPDX-License-Identifier: Apache-2.0
// Reads a session's submission ring on a thread of its own and hands each
// Enqueue to the job, like the session stream does for stream messages.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "daemon/server/session.h"

namespace gradsync::server {

class RingReader {
 public:
  using OnEnqueue = std::function<void(const v1::Enqueue&)>;
  // `on_violation` is called once if the client corrupts the ring; the
  // reader then stops.
  using OnViolation = std::function<void(const std::string&)>;

  RingReader(std::shared_ptr<Session> session, OnEnqueue on_enqueue, OnViolation on_violation);
  ~RingReader();  // stops and joins
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

 private:
  void loop();

  std::shared_ptr<Session> session_;
  OnEnqueue on_enqueue_;
  OnViolation on_violation_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gradsync::server
