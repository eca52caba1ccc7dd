// SPDX-License-Identifier: Apache-2.0
// The daemon-to-daemon data plane, seen by the collective algorithms (gloo's
// Device/Pair/UnboundBuffer shape): a Transport publishes an address, connects
// to peers by theirs, and moves tagged byte ranges asynchronously. Every wait
// takes a deadline and ends early once the transport is aborted or a peer's
// connection fails. Implementations: ucx/ (UCX tag matching). Not
// thread-safe, except abort(): one collective thread drives a transport and
// its peers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace gradsync::transport {

using Clock = std::chrono::steady_clock;

// One send or receive in flight.
class Request {
 public:
  virtual ~Request() = default;
  // True once the transfer finished (successfully or not); drives progress.
  virtual bool test() = 0;
  // The outcome, once test() returned true.
  virtual Status status() const = 0;
};
using RequestPtr = std::unique_ptr<Request>;

// Counters of one connection (readable from any thread).
struct PeerStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t failed_transfers = 0;
};

// A connection to one remote daemon.
class Peer {
 public:
  virtual ~Peer() = default;
  // Sends `bytes` from `data` with `tag`. `data` must stay valid until the
  // request completes.
  virtual RequestPtr isend(const void* data, size_t bytes, uint64_t tag) = 0;
  // Receives exactly `bytes` with `tag` from this peer into `data`.
  virtual RequestPtr irecv(void* data, size_t bytes, uint64_t tag) = 0;
  // Who the peer is, as given at connect() ("node 10.0.0.2:7070"), for
  // error messages.
  virtual const std::string& name() const = 0;
  virtual PeerStats stats() const = 0;
};
using PeerPtr = std::unique_ptr<Peer>;

class Transport {
 public:
  virtual ~Transport() = default;
  // Opaque bytes other daemons pass to connect() to reach this one.
  virtual std::string address() const = 0;
  // Connects to the daemon at `address`, called `name` in errors.
  // Non-blocking where the implementation allows; the first transfer
  // completes the handshake.
  virtual StatusOr<PeerPtr> connect(const std::string& address, const std::string& name) = 0;
  // Drives transfers until every one of `requests` has completed or the
  // deadline passes (DEADLINE_EXCEEDED naming `what` and the transfers
  // still pending); returns the first failed request's status otherwise.
  // Returns at once (UNAVAILABLE, naming the cause) once abort() was called
  // or a peer's connection failed, whichever came first.
  virtual Status waitAll(Request* const* requests, size_t count, Clock::time_point deadline,
                         const std::string& what) = 0;
  // Drives transfers until one of `requests` has completed, `wake_fd`
  // (an eventfd or pipe of the caller's; -1: none) is readable, or `until`
  // passes; OK in all three cases (the caller looks at which). Errors as
  // waitAll: once abort() was called or a peer's connection failed.
  virtual Status waitAny(Request* const* requests, size_t count, int wake_fd, Clock::time_point until) = 0;
  // Drives transfers with none to wait for, until one of `wake_fds` (as
  // waitAny's; -1 entries are ignored) is readable or `until` passes;
  // aborts and failed peers do not end it. The thread that runs a job's transfers calls it while it has
  // nothing else to do: a send completes once queued here (UCX's eager
  // protocol), and what is queued, and the answers to a new connection's
  // handshake, leave only while the transport is driven. Without it a
  // neighbour can wait for a collective's last bytes until its timeout.
  virtual void idle(const std::vector<int>& wake_fds, Clock::time_point until) = 0;
  // Ends the wait in progress, and every later one, with `reason` (the job
  // failed: a node was lost, the daemon stops). Thread-safe; the first
  // reason is kept.
  virtual void abort(const std::string& reason) = 0;
  // Lifts an abort() so that transfers can run again (an elastic job moved
  // to a new epoch: the old epoch's waits ended, the new epoch's begin).
  // Same thread as the transfers; the caller makes sure no abort meant to
  // be final is lifted.
  virtual void resume() = 0;
};
using TransportPtr = std::unique_ptr<Transport>;

}  // namespace gradsync::transport
