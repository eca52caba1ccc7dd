// SPDX-License-Identifier: Apache-2.0
// The messages waiting to be written to one follower's coordination stream,
// in order, one write in flight at a time, and bounded: the leader never
// waits for a follower's stream (its writes only queue), and a follower that
// lets more than Limits wait (it stopped reading, or reads slower than the
// job steps) is cut rather than holding memory without end. It also says
// when the stream may finish: once it is closed and nothing is in flight.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

// A message for one or more followers' outboxes, with its encoded size.
struct SharedMessage {
  std::shared_ptr<const v1::LeaderMessage> message;
  size_t bytes = 0;
};
SharedMessage share(v1::LeaderMessage message);

class Outbox {
 public:
  struct Limits {
    size_t messages = 16384;          // waiting, the one being written counted
    size_t bytes = size_t{64} << 20;  // their encoded size
  };
  enum class Push {
    kQueued,      // behind the write in flight
    kWriteFront,  // no write was in flight: the caller starts writing front()
    kOverflow,    // past the limits: closed, unsent messages dropped; the caller cuts the stream, then cancelled()
    kClosed,      // closed before: nothing queued
  };
  // What follows a write: the next message to write (null: none), or the
  // stream's finish (once: closed, nothing in flight).
  struct AfterWrite {
    const v1::LeaderMessage* next = nullptr;
    bool finish = false;
  };

  explicit Outbox(Limits limits) : limits_(limits) {}

  // Queues `message` (one batch goes to every follower's outbox).
  Push push(const SharedMessage& message) GS_EXCLUDES(mutex_);
  // The message in flight (valid until written() is called for it).
  const v1::LeaderMessage* front() const GS_EXCLUDES(mutex_);
  // The write in flight ended (`ok`: sent; else the stream broke: what waits
  // is dropped and nothing more is queued).
  AfterWrite written(bool ok) GS_EXCLUDES(mutex_);
  // Nothing more is queued; what waits is still written. True when the
  // stream may finish now (nothing in flight); else the last written() says
  // so. Later calls return false.
  bool closeWhenWritten() GS_EXCLUDES(mutex_);
  // After kOverflow, the caller has cancelled the call: the stream may
  // finish from now on (true: now, by the caller). Until then it does not,
  // so that the call outlives the cancellation.
  bool cancelled() GS_EXCLUDES(mutex_);
  // What waited when it overflowed ("17000 messages (80 MiB) waited, ...").
  std::string overflow() const GS_EXCLUDES(mutex_);

 private:
  bool finishNowLocked() GS_REQUIRES(mutex_);

  const Limits limits_;
  mutable Mutex mutex_;
  std::deque<SharedMessage> queue_ GS_GUARDED_BY(mutex_);  // front: in flight
  size_t bytes_ GS_GUARDED_BY(mutex_) = 0;
  bool writing_ GS_GUARDED_BY(mutex_) = false;
  bool closed_ GS_GUARDED_BY(mutex_) = false;      // nothing more is queued
  bool finishing_ GS_GUARDED_BY(mutex_) = false;   // the stream finishes once nothing is in flight
  bool finished_ GS_GUARDED_BY(mutex_) = false;    // and that was said
  bool cancelling_ GS_GUARDED_BY(mutex_) = false;  // overflowed, the call not cancelled yet
  std::string overflow_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::peer
