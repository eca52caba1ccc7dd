// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/fast_rounds.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <thread>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using transport::Clock;

// n "daemons" in one process (collective::makeMesh), each with its rounds.
struct Daemon {
  collective::MeshNode node;
  std::unique_ptr<FastRounds> rounds;
};

std::vector<Daemon> makeDaemons(int n) {
  auto nodes = collective::makeMesh(n);
  std::vector<Daemon> daemons(n);
  for (int i = 0; i < n; ++i) {
    daemons[i].node = std::move(nodes[i]);
    daemons[i].rounds = std::make_unique<FastRounds>(collective::contextFor(i, daemons[i].node, 0));
  }
  return daemons;
}

// One round on every daemon at once: daemon i offers ready[i].
std::vector<StatusOr<FastRounds::Outcome>> round(std::vector<Daemon>& daemons,
                                                 const std::vector<std::vector<uint64_t>>& ready,
                                                 uint64_t leader_sequence) {
  std::vector<StatusOr<FastRounds::Outcome>> out(daemons.size(), internalError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < daemons.size(); ++i) {
    threads.emplace_back([&, i] {
      // Only the leader's part counts: the others' is ignored.
      const FastRounds::LeaderPart leader{i == 0 ? leader_sequence : 999, i == 0 ? leader_sequence << 20 : 1};
      out[i] = daemons[i].rounds->exchange(ready[i], leader, Clock::now() + std::chrono::seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

class FastRoundsTest : public ::testing::TestWithParam<int> {};

TEST_P(FastRoundsTest, EveryDaemonRunsWhatAllOfferedAndTheLeadersSequence) {
  const int n = GetParam();
  auto daemons = makeDaemons(n);
  // Id 5 everywhere; 9 missing on the last daemon; 4096 (the last bit)
  // everywhere; 5000 is past the bits and never agreed.
  std::vector<std::vector<uint64_t>> ready(n, {5, 9, 4096, 5000});
  ready[n - 1] = {4096, 5, 5000};
  auto first = round(daemons, ready, 17);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(first[i].isOk()) << first[i].status().toString();
    EXPECT_EQ(first[i]->ids, (std::vector<uint64_t>{5, 4096})) << "daemon " << i;
    EXPECT_EQ(first[i]->leader_sequence, 17u) << "daemon " << i;
    EXPECT_EQ(first[i]->fusion_threshold_bytes, 17u << 20) << "daemon " << i;
  }
  // The next round: nothing in common.
  std::vector<std::vector<uint64_t>> apart(n);
  for (int i = 0; i < n; ++i) apart[i] = {static_cast<uint64_t>(100 + i)};
  auto second = round(daemons, apart, 18);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(second[i].isOk()) << second[i].status().toString();
    EXPECT_TRUE(second[i]->ids.empty());
    EXPECT_EQ(second[i]->leader_sequence, 18u);
  }
}

TEST_P(FastRoundsTest, AWaitingDaemonWakesWhenAnotherStartsTheRoundOrItsFdIsWritten) {
  const int n = GetParam();
  auto daemons = makeDaemons(n);
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  // Nobody started: the timeout passes.
  auto idle = daemons[1].rounds->waitForPeers(fd, Clock::now() + std::chrono::milliseconds(50));
  ASSERT_TRUE(idle.isOk()) << idle.status().toString();
  EXPECT_FALSE(*idle);
  // Its own fd.
  const uint64_t one = 1;
  ASSERT_EQ(::write(fd, &one, sizeof one), 8);
  auto woken = daemons[1].rounds->waitForPeers(fd, Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(woken.isOk());
  EXPECT_FALSE(*woken);
  uint64_t drained;
  ASSERT_EQ(::read(fd, &drained, sizeof drained), 8);
  // Daemon 0 starts the round: the first daemon it sends to sees it, then
  // every daemon takes part.
  std::vector<StatusOr<FastRounds::Outcome>> out(n, internalError("not run"));
  std::thread starter([&] { out[0] = daemons[0].rounds->exchange({3}, {1}, Clock::now() + std::chrono::seconds(20)); });
  const int first = collective::doublingSteps(0, n).front().peer;
  auto started = daemons[first].rounds->waitForPeers(fd, Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(started.isOk()) << started.status().toString();
  EXPECT_TRUE(*started);
  std::vector<std::thread> others;
  for (int i = 1; i < n; ++i) {
    others.emplace_back(
        [&, i] { out[i] = daemons[i].rounds->exchange({3}, {}, Clock::now() + std::chrono::seconds(20)); });
  }
  starter.join();
  for (auto& t : others) t.join();
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(out[i].isOk()) << out[i].status().toString();
    EXPECT_EQ(out[i]->ids, (std::vector<uint64_t>{3}));
  }
  ::close(fd);
}

// Each daemon sends log2(n) messages a round (two more where n is not a
// power of two), not n - 1.
TEST_P(FastRoundsTest, ADaemonSendsLogNMessagesPerRound) {
  const int n = GetParam();
  auto daemons = makeDaemons(n);
  for (uint64_t sequence = 1; sequence <= 3; ++sequence) {
    auto out = round(daemons, std::vector<std::vector<uint64_t>>(n, {sequence}), sequence);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(out[i].isOk()) << out[i].status().toString();
  }
  int log = 0;
  while ((2 << log) <= n) ++log;
  for (int i = 0; i < n; ++i) EXPECT_LE(daemons[i].rounds->messagesSent(), 3u * (log + 2)) << "daemon " << i;
  EXPECT_EQ(daemons[0].rounds->messagesSent() + 0, 3u * (log + (n > (1 << log) ? 2 : 0)));
}

TEST_P(FastRoundsTest, ADaemonThatNeverAnswersEndsTheRoundAtTheDeadline) {
  auto daemons = makeDaemons(GetParam());
  auto out = daemons[0].rounds->exchange({1}, {}, Clock::now() + std::chrono::milliseconds(200));
  ASSERT_FALSE(out.isOk());
  EXPECT_EQ(out.status().code(), StatusCode::kDeadlineExceeded) << out.status().toString();
  EXPECT_NE(out.status().message().find("round 1 of the cached steady state"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Daemons, FastRoundsTest, ::testing::Values(2, 3, 4, 5, 8));

}  // namespace
}  // namespace gradsync::peer
