// SPDX-License-Identifier: Apache-2.0
// Which followers a follower tells of a lost node: a notice that each
// follower passes on once reaches all of them within ceil(log2 F) hops,
// with at most ceil(log2 F) calls made by each.
#include "daemon/peer/abort_notices.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <set>

namespace gradsync::peer {
namespace {

size_t ceilLog2(size_t n) {
  size_t bits = 0;
  while ((size_t{1} << bits) < n) ++bits;
  return bits;
}

TEST(AbortNoticesTest, EachFollowerTellsTheFollowersOneTwoFourPlacesOnAndNotItself) {
  EXPECT_EQ(AbortNotices::relaysOf(0, 1), std::vector<size_t>{});
  EXPECT_EQ(AbortNotices::relaysOf(1, 2), std::vector<size_t>{0});
  EXPECT_EQ(AbortNotices::relaysOf(6, 8), (std::vector<size_t>{7, 0, 2}));
  for (size_t followers : {3u, 5u, 16u, 999u}) {
    for (size_t self = 0; self < followers; ++self) {
      const auto relays = AbortNotices::relaysOf(self, followers);
      EXPECT_EQ(relays.size(), ceilLog2(followers)) << followers;
      EXPECT_EQ(std::set<size_t>(relays.begin(), relays.end()).size(), relays.size()) << "a relay told twice";
      for (size_t r : relays) EXPECT_NE(r, self);
    }
  }
}

// Flooding from any one follower, each passing it on once when it first
// hears: every follower hears, within ceil(log2 F) hops.
TEST(AbortNoticesTest, ANoticePassedOnOnceByEachReachesEveryFollowerInLog2Hops) {
  for (size_t followers : {2u, 4u, 7u, 64u, 1000u}) {
    for (size_t first : {size_t{0}, followers / 2, followers - 1}) {
      std::vector<int> hops(followers, -1);
      hops[first] = 0;
      std::vector<size_t> wave{first};
      size_t calls = 0;
      int hop = 0;
      while (!wave.empty()) {
        ++hop;
        std::vector<size_t> next;
        for (size_t node : wave) {
          for (size_t relay : AbortNotices::relaysOf(node, followers)) {
            ++calls;
            if (hops[relay] < 0) {
              hops[relay] = hop;
              next.push_back(relay);
            }
          }
        }
        wave = std::move(next);
      }
      for (size_t i = 0; i < followers; ++i) {
        ASSERT_GE(hops[i], 0) << "follower " << i << " of " << followers << " never heard";
        EXPECT_LE(static_cast<size_t>(hops[i]), ceilLog2(followers));
      }
      EXPECT_EQ(calls, followers * ceilLog2(followers));
    }
  }
}

// A follower's daemon that counts the notices it hears.
class CountingPeer final : public v1::Peer::Service {
 public:
  CountingPeer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~CountingPeer() override { server_->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  grpc::Status AbortJob(grpc::ServerContext*, const v1::AbortJobRequest*, v1::AbortJobResponse*) override {
    calls.fetch_add(1);
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// Let go of at once, many times over: the holder waits for the calls
// (their callbacks own nothing, so none ends the calls inside its own
// completion), and every notice was delivered by then.
TEST(AbortNoticesTest, LetGoOfAtOnceItWaitsForEveryCall) {
  CountingPeer a, b, c;
  const std::vector<std::string> addresses = {a.address(), b.address(), c.address()};
  constexpr int kRounds = 50;
  for (int i = 0; i < kRounds; ++i) {
    v1::AbortJobRequest request;
    request.set_job_id("j");
    AbortNotices::send(std::move(request), addresses, nullptr).reset();
  }
  EXPECT_EQ(a.calls.load(), kRounds);
  EXPECT_EQ(b.calls.load(), kRounds);
  EXPECT_EQ(c.calls.load(), kRounds);
}

// A daemon that is gone: the call ends at once (refused) or at its
// deadline, never later.
TEST(AbortNoticesTest, ANoticeToADaemonThatIsGoneEndsByItsDeadline) {
  std::string gone;
  {
    CountingPeer peer;
    gone = peer.address();
  }
  const auto start = std::chrono::steady_clock::now();
  AbortNotices::send(v1::AbortJobRequest(), {gone}, nullptr)->wait();
  EXPECT_LE(std::chrono::steady_clock::now() - start, AbortNotices::kDeadline + std::chrono::seconds(1));
}

}  // namespace
}  // namespace gradsync::peer
