// SPDX-License-Identifier: Apache-2.0
#include "handoff/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "handoff/fd_passing.h"
#include "handoff/shm_layout.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::handoff {
namespace {

using ::testing::HasSubstr;

TEST(Frame, RoundTrip) {
  v1::HandoffRequest request;
  request.mutable_buffer_export()->set_buffer_id(42);
  request.mutable_buffer_export()->set_ipc_handle(std::string(64, 'x'));
  v1::HandoffRequest decoded;
  ASSERT_TRUE(decodeFrame(encodeFrame(request), &decoded).isOk());
  EXPECT_EQ(decoded.buffer_export().buffer_id(), 42u);
}

TEST(Frame, RejectsMalformedFrames) {
  v1::HandoffRequest out;
  EXPECT_THAT(decodeFrame("abc", &out).message(), HasSubstr("frame of 3 bytes"));
  std::string frame = encodeFrame(v1::HandoffRequest());
  frame[0] ^= 1;
  EXPECT_THAT(decodeFrame(frame, &out).message(), HasSubstr("magic"));
  FrameHeader header{kFrameMagic, 10};
  std::string lying(reinterpret_cast<const char*>(&header), sizeof(header));
  lying += "abc";
  EXPECT_THAT(decodeFrame(lying, &out).message(), HasSubstr("says 10 bytes but carries 3"));
  header.length = kMaxFramePayload + 1;
  std::string huge(reinterpret_cast<const char*>(&header), sizeof(header));
  EXPECT_THAT(decodeFrame(huge, &out).message(), HasSubstr("limit"));
  header.length = 3;
  std::string garbage(reinterpret_cast<const char*>(&header), sizeof(header));
  garbage += "\xff\xff\xff";
  EXPECT_THAT(decodeFrame(garbage, &out).message(), HasSubstr("does not parse"));
}

TEST(Frame, ExchangeOverSeqpacket) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  std::thread server([&] {
    std::string bytes;
    ASSERT_TRUE(recvMessage(pair[1], &bytes, 1 << 18, std::chrono::milliseconds(2000)).isOk());
    v1::HandoffRequest request;
    ASSERT_TRUE(decodeFrame(bytes, &request).isOk());
    v1::HandoffResponse response;
    response.set_code(0);
    response.set_message("id " + std::to_string(request.buffer_release().buffer_id()));
    const std::string frame = encodeFrame(response);
    ASSERT_TRUE(sendWithFd(pair[1], frame.data(), frame.size(), -1).isOk());
    ::close(pair[1]);
  });
  v1::HandoffRequest request;
  request.mutable_buffer_release()->set_buffer_id(9);
  v1::HandoffResponse response;
  ASSERT_TRUE(exchangeFrames(pair[0], request, &response, std::chrono::milliseconds(2000)).isOk());
  EXPECT_EQ(response.message(), "id 9");
  server.join();
  // The peer is gone: an exchange fails instead of waiting.
  EXPECT_FALSE(exchangeFrames(pair[0], request, &response, std::chrono::milliseconds(2000)).isOk());
  ::close(pair[0]);
}

TEST(Frame, RecvMessageSeesEndOfConnection) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  ::close(pair[1]);
  std::string bytes = "x";
  ASSERT_TRUE(recvMessage(pair[0], &bytes, 64, std::chrono::milliseconds(100)).isOk());
  EXPECT_TRUE(bytes.empty());
  ::close(pair[0]);
}

// A cuMem export's chunks: many descriptors with one message, all received
// in order; more than a message may carry are refused before sending.
TEST(Frame, ManyDescriptorsTravelWithOneMessage) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::vector<int> fds(kMaxFdsPerFrame, pipe_fds[1]);
  ASSERT_TRUE(sendWithFds(pair[0], "m", 1, fds).isOk());
  std::string bytes;
  std::vector<UniqueFd> received;
  ASSERT_TRUE(recvMessage(pair[1], &bytes, 64, std::chrono::milliseconds(2000), &received).isOk());
  EXPECT_EQ(bytes, "m");
  ASSERT_EQ(received.size(), kMaxFdsPerFrame);
  ASSERT_EQ(::write(received.back().get(), "x", 1), 1);  // the pipe's write end, dup'ed
  char c = 0;
  ASSERT_EQ(::read(pipe_fds[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  fds.push_back(pipe_fds[1]);
  EXPECT_THAT(sendWithFds(pair[0], "m", 1, fds).message(), HasSubstr("251 descriptors"));
  for (int fd : {pair[0], pair[1], pipe_fds[0], pipe_fds[1]}) ::close(fd);
}

}  // namespace
}  // namespace gradsync::handoff
