// SPDX-License-Identifier: Apache-2.0
// The leader's side of one follower's Coordinate stream on gRPC's callback
// API: no thread per follower. Reads go to the stream's FollowerSession;
// writes queue in a bounded Outbox, one in flight at a time, so the leader's
// fan-out never waits for a follower, and a follower that lets more than the
// limits wait is cut (its call cancelled, the session told why). The stream
// finishes once what was queued is written.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/peer/follower_stream.h"
#include "daemon/peer/outbox.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

class CoordinateReactor : public grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage> {
 public:
  // What serves a stream whose first message is `hello` and whose writes go
  // to `stream`: sets `session`, or returns the status that refuses it.
  using Resolve = std::function<grpc::Status(const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                                             std::unique_ptr<FollowerSession>* session)>;

  // Starts reading. gRPC owns the reactor; it deletes itself when done.
  CoordinateReactor(grpc::CallbackServerContext* context, Resolve resolve, Outbox::Limits limits);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  class Sink;
  ~CoordinateReactor() override = default;

  // The session hears of the stream's end (once).
  void endSession();
  // Ends the stream with `status` once what was queued is written.
  void finishWhenWritten(const grpc::Status& status);
  grpc::Status status() const GS_EXCLUDES(mutex_);
  // Sink: the follower fell behind (`why`); the call is cancelled.
  void cut(const std::string& why) GS_EXCLUDES(mutex_);

  grpc::CallbackServerContext* const context_;
  const Resolve resolve_;
  const std::shared_ptr<Sink> sink_;          // outlives the reactor while the job holds it
  std::unique_ptr<FollowerSession> session_;  // set by the first read
  v1::FollowerMessage incoming_;
  mutable Mutex mutex_;
  bool session_ended_ GS_GUARDED_BY(mutex_) = false;
  grpc::Status status_ GS_GUARDED_BY(mutex_);
  std::string cut_ GS_GUARDED_BY(mutex_);  // why the leader cut the follower
};

}  // namespace gradsync::peer
