// SPDX-License-Identifier: Apache-2.0
#include "daemon/exe/service_notifier.h"

#include <systemd/sd-daemon.h>

#include <cstring>

#include "daemon/common/logging.h"

namespace gradsync::exe {

ServiceNotifier::ServiceNotifier() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec);
    GS_LOG(main, info, "systemd watchdog every {} ms: pinging every {} ms", usec / 1000, usec / 2000);
  }
}

void ServiceNotifier::send(const std::string& state) {
  const int sent = sd_notify(0, state.c_str());
  if (sent < 0) GS_LOG(main, warn, "cannot notify systemd ({}): {}", state, std::strerror(-sent));
}

void ServiceNotifier::ready(const std::string& status) {
  MutexLock lock(mutex_);
  last_status_ = status;
  send("READY=1\nSTATUS=" + status);
}

void ServiceNotifier::status(const std::string& status) {
  MutexLock lock(mutex_);
  if (status == last_status_) return;
  last_status_ = status;
  send("STATUS=" + status);
}

void ServiceNotifier::reloading() {
  MutexLock lock(mutex_);
  send("RELOADING=1\nSTATUS=reloading the configuration");
  last_status_.clear();
}

void ServiceNotifier::stopping() {
  MutexLock lock(mutex_);
  send("STOPPING=1\nSTATUS=stopping: failing the jobs in flight");
}

void ServiceNotifier::watchdog(Clock::time_point now) {
  if (!watchdogEnabled()) return;
  MutexLock lock(mutex_);
  if (now - last_ping_ < watchdog_interval_ / 2) return;
  last_ping_ = now;
  send("WATCHDOG=1");
}

}  // namespace gradsync::exe
