// SPDX-License-Identifier: Apache-2.0
// UcxTransport over real UCX workers. idle: it drives what this side still
// has to move (a large send goes by rendezvous and needs its sender driven
// until the receiver has it), wakes on any of the caller's fds, ends at its
// time, and an abort does not end it. Receives: a message of another length
// is an error; a finished batch's strays are dropped by their tag bits.
#include "daemon/transport/ucx/ucx_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync::transport {
namespace {

using std::chrono::milliseconds;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(UcxIdleTest, DrivesASendUntilTheReceiverHasIt) {
  auto sender = UcxTransport::create().value();
  auto receiver = UcxTransport::create().value();
  auto to_receiver = sender->connect(receiver->address(), "node receiver").value();
  auto from_sender = receiver->connect(sender->address(), "node sender").value();
  std::vector<uint8_t> out(8 << 20, 7), in(out.size(), 0);
  RequestPtr send = to_receiver->isend(out.data(), out.size(), 42);
  Status received;
  std::thread receiving([&] {
    RequestPtr receive = from_sender->irecv(in.data(), in.size(), 42);
    Request* one[] = {receive.get()};
    received = receiver->waitAll(one, 1, Clock::now() + std::chrono::seconds(20), "the test's receive");
  });
  // The sender waits for nothing of its own: idle alone moves the bytes.
  const auto start = Clock::now();
  while (!send->test() && secondsSince(start) < 20) sender->idle({}, Clock::now() + milliseconds(50));
  receiving.join();
  ASSERT_TRUE(received.isOk()) << received.toString();
  EXPECT_TRUE(send->test());
  EXPECT_EQ(in, out);
}

TEST(UcxIdleTest, WakesOnAnyOfItsFdsAndEndsAtItsTime) {
  auto transport = UcxTransport::create().value();
  const int quiet = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  const int woken = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(100));
    const uint64_t one = 1;
    ASSERT_EQ(::write(woken, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  });
  auto start = Clock::now();
  transport->idle({quiet, -1, woken}, Clock::now() + std::chrono::seconds(30));
  waker.join();
  EXPECT_GE(secondsSince(start), 0.09);
  EXPECT_LT(secondsSince(start), 10.0);
  // Nothing readable: until the time given, an abort notwithstanding.
  uint64_t drained;
  ASSERT_EQ(::read(woken, &drained, sizeof drained), static_cast<ssize_t>(sizeof drained));
  transport->abort("the job failed");
  start = Clock::now();
  transport->idle({quiet, woken}, Clock::now() + milliseconds(300));
  EXPECT_GE(secondsSince(start), 0.29);
  EXPECT_LT(secondsSince(start), 10.0);
  ::close(quiet);
  ::close(woken);
}

// A receive whose message arrives with another length fails by name (the
// lengths, the peer), shorter or longer: never reported done.
TEST(UcxReceiveTest, AMessageOfAnotherLengthIsANamedErrorNotADoneReceive) {
  auto sender = UcxTransport::create().value();
  auto receiver = UcxTransport::create().value();
  auto to_receiver = sender->connect(receiver->address(), "node sender-side").value();
  auto from_sender = receiver->connect(sender->address(), "node 10.0.0.1:7070").value();
  std::vector<uint8_t> out(8, 7), in(64, 0);
  struct Case {
    uint64_t tag;
    size_t expected;
    const char* says;
  };
  for (const Case& c :
       {Case{43, 16, "received 8 bytes, expected 16"}, Case{44, 4, "a message longer than the 4 bytes expected"}}) {
    RequestPtr send = to_receiver->isend(out.data(), out.size(), c.tag);
    RequestPtr receive = from_sender->irecv(in.data(), c.expected, c.tag);
    Status received;
    std::thread driving([&] {
      const auto start = Clock::now();
      while (!send->test() && secondsSince(start) < 10) sender->idle({}, Clock::now() + milliseconds(10));
    });
    Request* one[] = {receive.get()};
    received = receiver->waitAll(one, 1, Clock::now() + std::chrono::seconds(10), "the test's receive");
    driving.join();
    EXPECT_EQ(received.code(), StatusCode::kInternal) << received.toString();
    EXPECT_NE(received.message().find(c.says), std::string::npos) << received.toString();
    EXPECT_NE(received.message().find("from node 10.0.0.1:7070"), std::string::npos) << received.toString();
  }
}

// What arrived with a batch's tag bits and matched no receive is dropped
// and counted by dropMatching; another batch's message stays for its
// receive.
TEST(UcxReceiveTest, DropMatchingTakesOnlyTheMessagesOfTheTagBitsGiven) {
  auto sender = UcxTransport::create().value();
  auto receiver = UcxTransport::create().value();
  auto to_receiver = sender->connect(receiver->address(), "node sender-side").value();
  auto from_sender = receiver->connect(sender->address(), "node sender").value();
  const uint64_t mask = ~((uint64_t{1} << 40) - 1);
  const uint64_t old_batch = uint64_t{0x8a} << 56, next_batch = uint64_t{0x8b} << 56;
  std::vector<uint8_t> stale(8, 1), stale_too(8, 2), live(8, 3), in(8, 0);
  RequestPtr sends[] = {to_receiver->isend(stale.data(), 8, old_batch | 5),
                        to_receiver->isend(stale_too.data(), 8, old_batch | 6),
                        to_receiver->isend(live.data(), 8, next_batch | 5)};
  const auto start = Clock::now();
  size_t dropped = 0;
  // The receiver drives its worker until both stale messages are in and dropped.
  while (dropped < 2 && secondsSince(start) < 10) {
    sender->idle({}, Clock::now() + milliseconds(5));
    receiver->idle({}, Clock::now() + milliseconds(5));
    dropped += receiver->dropMatching(old_batch, mask);
  }
  EXPECT_EQ(dropped, 2u);
  RequestPtr receive = from_sender->irecv(in.data(), in.size(), next_batch | 5);
  Request* one[] = {receive.get()};
  const Status received = receiver->waitAll(one, 1, Clock::now() + std::chrono::seconds(10), "the live receive");
  ASSERT_TRUE(received.isOk()) << received.toString();
  EXPECT_EQ(in, live);
  EXPECT_EQ(receiver->dropMatching(old_batch, mask), 0u);
}

}  // namespace
}  // namespace gradsync::transport
