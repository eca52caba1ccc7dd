// SPDX-License-Identifier: Apache-2.0
// A follower's link to its job's leader: the channel (with keepalives: a
// silent leader is noticed within about 4 s), the Coordinate stream, and
// when the leader was last heard. A write with nothing in flight or waiting
// goes out at once on the caller's thread; otherwise it queues, and the
// link's writer thread sends what queued in order, the requests merged into
// one message (FollowerMessage.requests: one message per node and cycle,
// not per rank and tensor, while the stream is busy); while no stream is
// open (before the first; between a lost leader and the next one's stream)
// writes wait. What the messages mean is CrossNode's business.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"

namespace gradsync::peer {

class LeaderLink {
 public:
  // `credentials` null: plaintext. `written`: told each message's size once
  // it is written (the coordination traffic).
  LeaderLink(std::shared_ptr<grpc::ChannelCredentials> credentials, std::function<void(size_t bytes)> written);
  ~LeaderLink();  // cancels the stream, joins the writer

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

  // Any thread: writes `message` now when the stream is idle (as long as
  // the stream takes it), else queues it for the writer.
  void write(v1::FollowerMessage message) GS_EXCLUDES(mutex_);
  bool isOpen() const GS_EXCLUDES(mutex_);
  // Ends the stream gracefully once what was queued is written (the leader
  // then knows this node's ranks finished), or at once: the reader sees an
  // error.
  void writesDone() GS_EXCLUDES(mutex_);
  void cancel() GS_EXCLUDES(mutex_);

  // The last message from the leader (steady clock, ms; 0: none yet).
  int64_t heardMs() const { return heard_ms_.load(); }
  void heardAt(int64_t ms) { heard_ms_.store(ms); }

  // The most bytes of requests merged into one message.
  static constexpr size_t kMergedBytes = size_t{256} << 10;

 private:
  using Stream = grpc::ClientReaderWriter<v1::FollowerMessage, v1::LeaderMessage>;
  // The writer thread: sends what is queued while a stream is open.
  void writeLoop() GS_EXCLUDES(mutex_);
  // The queued messages in the order to write them, consecutive requests
  // merged (up to kMergedBytes each; RequestBatch).
  std::vector<v1::FollowerMessage> takeMergedLocked() GS_REQUIRES(mutex_);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::function<void(size_t)> written_;
  std::shared_ptr<grpc::Channel> channel_;  // reader thread
  std::string address_;                     // channel_'s leader
  mutable Mutex mutex_;
  CondVar cv_;
  std::unique_ptr<grpc::ClientContext> context_ GS_GUARDED_BY(mutex_);  // with stream_
  std::unique_ptr<Stream> stream_ GS_GUARDED_BY(mutex_);
  std::deque<v1::FollowerMessage> queue_ GS_GUARDED_BY(mutex_);
  bool writes_done_ GS_GUARDED_BY(mutex_) = false;  // asked for; done once the queue is written
  bool writing_ GS_GUARDED_BY(mutex_) = false;      // a thread writes to stream_ outside the lock
  bool stopping_ GS_GUARDED_BY(mutex_) = false;
  std::thread writer_;  // started by the first open()
  std::atomic<int64_t> heard_ms_{0};
};

}  // namespace gradsync::peer
