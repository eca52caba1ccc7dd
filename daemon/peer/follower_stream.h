// SPDX-License-Identifier: Apache-2.0
// The leader's end of one follower's Coordinate stream, as a job sees it:
// FollowerStream takes messages and never blocks (CoordinateReactor queues
// them in an Outbox); FollowerSession is what the job does with the
// follower's messages and the stream's end; AttachedStream is the job's hold
// on a follower's stream while it lives.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/peer/outbox.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class FollowerStream {
 public:
  virtual ~FollowerStream() = default;
  // Queues `message` behind those queued before; false when the stream has
  // ended (nothing queued). Never waits: a follower that lets too much wait
  // is cut, and its session hears why.
  virtual bool send(const SharedMessage& message) = 0;
};

class FollowerSession {
 public:
  virtual ~FollowerSession() = default;
  // One message from the follower; a status other than OK ends the stream
  // with it (once what was queued is written).
  virtual grpc::Status onMessage(const v1::FollowerMessage& message) = 0;
  // The stream ended, once: closed by the follower (`cut_off` false), or
  // cancelled, broken, or cut by the leader (`why` says why the leader cut
  // it; empty otherwise). What is sent from then on is dropped.
  virtual void onEnd(bool cut_off, const std::string& why) = 0;
};

class AttachedStream {
 public:
  void attach(std::shared_ptr<FollowerStream> stream) GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    stream_ = std::move(stream);
  }
  void detach() GS_EXCLUDES(mutex_) { attach(nullptr); }
  bool attached() const GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return stream_ != nullptr;
  }
  // Queues `message`; false when no stream is attached or it ended.
  bool send(const SharedMessage& message) GS_EXCLUDES(mutex_) {
    std::shared_ptr<FollowerStream> stream;
    {
      MutexLock lock(mutex_);
      stream = stream_;
    }
    // Outside the lock: a stream cut here may end (and detach) at once.
    return stream != nullptr && stream->send(message);
  }
  bool send(v1::LeaderMessage message) { return send(share(std::move(message))); }

 private:
  mutable Mutex mutex_;
  std::shared_ptr<FollowerStream> stream_ GS_GUARDED_BY(mutex_);
};

}  // namespace gradsync::peer
