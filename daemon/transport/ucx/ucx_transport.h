// SPDX-License-Identifier: Apache-2.0
// Transport over UCX tag matching (Debian's libucx: tcp, posix/sysv shared
// memory, cma on one host). One UCP context and worker per transport;
// UCX_TLS and the other UCX_* variables select the transports, as usual.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/transport/transport.h"

namespace gradsync::transport {

// Settings a transport overrides in UCX's configuration; what is left empty
// or zero stays UCX's default or what the environment's UCX_* says.
struct UcxOptions {
  std::string net_devices;  // UCX_NET_DEVICES
  // UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE: bytes the tcp transport
  // moves per send and per receive call. Where the environment sets either,
  // the environment wins.
  size_t tcp_segment_bytes = 0;
};

class UcxTransport final : public Transport {
 public:
  static StatusOr<std::unique_ptr<UcxTransport>> create(const UcxOptions& options = {});
  ~UcxTransport() override;

  std::string address() const override { return address_; }
  StatusOr<PeerPtr> connect(const std::string& address, const std::string& name) override;
  Status waitAll(Request* const* requests, size_t count, Clock::time_point deadline, const std::string& what) override;
  Status waitAny(Request* const* requests, size_t count, int wake_fd, Clock::time_point until) override;
  void idle(const std::vector<int>& wake_fds, Clock::time_point until) override;
  void abort(const std::string& reason) override;
  void resume() override;
  // Drives the worker until everything sent has left this process (an
  // eager send completes while still queued here), at most `timeout`; call
  // before closing peers. Same thread as the transfers.
  void flush(Clock::duration timeout);
  // Receives and discards every message that arrived but matched no receive
  // (a transfer from outside the job, a forged or stale tag, or what was
  // left of an aborted collective), for at most a second; returns how many.
  // Same thread.
  size_t dropStrays();
  // Discards the messages that arrived with a tag matching `tag` under
  // `mask` and matched no receive (those of a finished batch), without
  // driving the worker: cheap when there are none. Returns how many. Same
  // thread.
  size_t dropMatching(uint64_t tag, uint64_t mask);

  ucp_worker_h worker() const { return worker_; }

 private:
  UcxTransport(ucp_context_h context, ucp_worker_h worker, std::string address)
      : context_(context), worker_(worker), address_(std::move(address)) {}

  ucp_context_h context_;
  ucp_worker_h worker_;
  std::string address_;
  int efd_ = -1;  // the worker's event fd (owned by UCX), for sleeping when idle
  // The first abort() or endpoint error; `failed_` is read on every spin.
  std::atomic<bool> failed_{false};
  Mutex failure_mutex_;
  std::string failure_ GS_GUARDED_BY(failure_mutex_);
};

}  // namespace gradsync::transport
