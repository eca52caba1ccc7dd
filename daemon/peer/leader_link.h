// SPDX-License-Identifier: Apache-2.0
// A follower's link to its job's leader: the channel (with keepalives: a
// silent leader is noticed within about 4 s), the Coordinate stream, the
// writes that wait while no stream is open (before the first; between a
// lost leader and the next one's stream), and when the leader was last
// heard. What the messages mean is CrossNode's business.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class LeaderLink {
 public:
  // `credentials` null: plaintext.
  explicit LeaderLink(std::shared_ptr<grpc::ChannelCredentials> credentials);

  // Reader thread (the follower's one thread of the link): points the link
  // at the leader at `address`, with a new channel.
  void connect(const std::string& address);
  const std::string& address() const { return address_; }
  // The channel (null before connect()) and a stub on it.
  grpc::Channel* channel() const { return channel_.get(); }
  std::unique_ptr<v1::Peer::Stub> stub() const { return v1::Peer::NewStub(channel_); }
  // Opens the stream on the channel: `hello`, then the writes that waited.
  void open(const v1::FollowerMessage& hello) GS_EXCLUDES(mutex_);
  // Reads the open stream until it ends, handing each message to
  // `on_message`; then drops it (writes wait from now on: a request written
  // to an ended stream would be lost) and returns its final status.
  grpc::Status read(const std::function<void(const v1::LeaderMessage&)>& on_message) GS_EXCLUDES(mutex_);

  // Any thread: writes `message`, or keeps it for the next stream while
  // none is open. False when the stream refused it.
  bool write(const v1::FollowerMessage& message) GS_EXCLUDES(mutex_);
  bool isOpen() const GS_EXCLUDES(mutex_);
  // Ends the stream gracefully (the leader then knows this node's ranks
  // finished), or at once: the reader sees an error.
  void writesDone() GS_EXCLUDES(mutex_);
  void cancel() GS_EXCLUDES(mutex_);

  // The last message from the leader (steady clock, ms; 0: none yet).
  int64_t heardMs() const { return heard_ms_.load(); }
  void heardAt(int64_t ms) { heard_ms_.store(ms); }

 private:
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::shared_ptr<grpc::Channel> channel_;  // reader thread
  std::string address_;                     // channel_'s leader
  mutable Mutex mutex_;
  std::unique_ptr<grpc::ClientContext> context_ GS_GUARDED_BY(mutex_);  // with stream_
  std::unique_ptr<grpc::ClientReaderWriter<v1::FollowerMessage, v1::LeaderMessage>> stream_ GS_GUARDED_BY(mutex_);
  std::vector<v1::FollowerMessage> backlog_ GS_GUARDED_BY(mutex_);
  std::atomic<int64_t> heard_ms_{0};
};

}  // namespace gradsync::peer
