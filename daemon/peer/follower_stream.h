// SPDX-License-Identifier: Apache-2.0
// The leader's end of one follower's Coordinate stream: writes one at a
// time (the batches, heartbeats, epochs and failures come from several
// threads) while the stream is attached; the call's handler detaches it
// before it returns.
#pragma once

#include <grpcpp/grpcpp.h>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

using LeaderStream = grpc::ServerReaderWriter<v1::LeaderMessage, v1::FollowerMessage>;

class FollowerStream {
 public:
  void attach(LeaderStream* stream) GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    stream_ = stream;
  }
  void detach() GS_EXCLUDES(mutex_) { attach(nullptr); }
  bool attached() const GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return stream_ != nullptr;
  }
  // Writes `message`; false when no stream is attached (nothing written). A
  // write the stream refuses is not reported: its reader sees the end.
  bool write(const v1::LeaderMessage& message) GS_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    if (stream_ == nullptr) return false;
    stream_->Write(message);
    return true;
  }

 private:
  mutable Mutex mutex_;
  LeaderStream* stream_ GS_GUARDED_BY(mutex_) = nullptr;
};

}  // namespace gradsync::peer
