// SPDX-License-Identifier: Apache-2.0
// systemd's notify protocol (sd_notify from libsystemd) for a Type=notify
// unit: READY=1 once the sockets are bound, STATUS= lines with jobs and
// ranks, WATCHDOG=1 from the housekeeping loop while the unit sets
// WatchdogSec, RELOADING=1 around a reload (SIGHUP) and STOPPING=1 at
// shutdown. Outside systemd (no NOTIFY_SOCKET) every call does nothing.
#pragma once

#include <chrono>
#include <string>

#include "base/mutex.h"
#include "base/thread_annotations.h"

namespace gradsync::exe {

class ServiceNotifier {
 public:
  using Clock = std::chrono::steady_clock;

  // Reads NOTIFY_SOCKET and WATCHDOG_USEC (and WATCHDOG_PID) as systemd
  // sets them.
  ServiceNotifier();

  void ready(const std::string& status);
  // Sends STATUS= only when `status` differs from the last one sent.
  void status(const std::string& status);
  void reloading();
  void stopping();
  // WATCHDOG=1 when half the unit's watchdog interval has passed since the
  // last one. Called from the loop whose liveness it vouches for.
  void watchdog(Clock::time_point now);

  bool watchdogEnabled() const { return watchdog_interval_.count() > 0; }

 private:
  void send(const std::string& state);

  Mutex mutex_;
  std::chrono::microseconds watchdog_interval_{0};  // set once, by the constructor
  Clock::time_point last_ping_ GS_GUARDED_BY(mutex_){};
  std::string last_status_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::exe
