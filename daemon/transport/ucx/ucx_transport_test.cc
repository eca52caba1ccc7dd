// SPDX-License-Identifier: Apache-2.0
// UcxTransport::idle over real UCX workers: it drives what this side still
// has to move (a large send goes by rendezvous and needs its sender driven
// until the receiver has it), wakes on any of the caller's fds, ends at its
// time, and an abort does not end it.
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

}  // namespace
}  // namespace gradsync::transport
