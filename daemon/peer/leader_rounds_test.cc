// SPDX-License-Identifier: Apache-2.0
// A leader's and two followers' LeaderRounds wired to each other in one
// process (each `send` delivers at once): the outcome is the AND of every
// part with the leader's part added, idle followers join a round begun
// elsewhere (at once when they still hold ids or the leader has a batch,
// else after the grace), and waits end with errors that say why.
#include "daemon/peer/leader_rounds.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

struct Star {
  std::unique_ptr<LeaderRounds> leader;
  std::vector<std::unique_ptr<LeaderRounds>> followers;
  std::atomic<int> begins{0};  // BEGIN messages the leader sent
  explicit Star(int count, std::chrono::milliseconds grace = LeaderRounds::kBeginGrace) {
    leader = std::make_unique<LeadingRounds>(
        count,
        [this](const v1::RoundMessage& m, const std::vector<int>* to) {
          for (size_t i = 0; i < followers.size(); ++i) {
            if (to != nullptr && std::find(to->begin(), to->end(), static_cast<int>(i) + 1) == to->end()) continue;
            if (m.kind() == v1::RoundMessage::BEGIN) ++begins;
            followers[i]->deliver(m, 0);
          }
        },
        nullptr, grace);
    for (int i = 0; i < count; ++i) {
      followers.push_back(std::make_unique<FollowingRounds>(
          [this, i](const v1::RoundMessage& m, const std::vector<int>*) { leader->deliver(m, i + 1); }));
    }
  }
};

transport::Clock::time_point in(std::chrono::milliseconds d) { return transport::Clock::now() + d; }

TEST(LeaderRoundsTest, TheOutcomeIsEveryPartsAndWithTheLeadersPart) {
  Star star(2);
  StatusOr<RoundExchange::Outcome> a = internalError("not run"), b = internalError("not run");
  std::thread fa([&] { a = star.followers[0]->exchange({1, 2, 3, 4000}, {}, in(5s)); });
  std::thread fb([&] { b = star.followers[1]->exchange({2, 3, 4000}, {}, in(5s)); });
  auto led = star.leader->exchange({1, 3, 4000}, {7, 1 << 20}, in(5s));
  fa.join();
  fb.join();
  for (const auto* outcome : {&led, &a, &b}) {
    ASSERT_TRUE(outcome->isOk()) << outcome->status().toString();
    EXPECT_THAT((*outcome)->ids, ElementsAre(3, 4000));
    EXPECT_EQ((*outcome)->leader_sequence, 7u);
    EXPECT_EQ((*outcome)->fusion_threshold_bytes, uint64_t{1} << 20);
  }
  EXPECT_EQ(star.leader->round(), 2u);
  EXPECT_EQ(star.followers[0]->round(), 2u);
  EXPECT_EQ(star.followers[0]->messagesSent(), 1u);
}

TEST(LeaderRoundsTest, AnIdleFollowerJoinsARoundTheLeaderBegan) {
  Star star(1);
  StatusOr<bool> woke = false;
  std::thread idle([&] { woke = star.followers[0]->waitForPeers(-1, in(5s)); });
  StatusOr<RoundExchange::Outcome> led = internalError("not run");
  std::thread lead([&] { led = star.leader->exchange({5}, {}, in(5s)); });
  idle.join();
  ASSERT_TRUE(woke.isOk());
  EXPECT_TRUE(*woke);
  auto followed = star.followers[0]->exchange({5}, {}, in(5s));
  lead.join();
  ASSERT_TRUE(led.isOk() && followed.isOk());
  EXPECT_THAT(followed->ids, ElementsAre(5));
}

TEST(LeaderRoundsTest, TheLeaderWakesWhenAFollowerBegins) {
  Star star(1);
  StatusOr<bool> woke = false;
  std::thread idle([&] { woke = star.leader->waitForPeers(-1, in(5s)); });
  StatusOr<RoundExchange::Outcome> followed = internalError("not run");
  std::thread follow([&] { followed = star.followers[0]->exchange({9}, {}, in(5s)); });
  idle.join();
  ASSERT_TRUE(woke.isOk());
  EXPECT_TRUE(*woke);
  auto led = star.leader->exchange({}, {}, in(5s));
  follow.join();
  ASSERT_TRUE(led.isOk() && followed.isOk());
  EXPECT_TRUE(led->ids.empty());  // the leader's ranks were not ready
}

TEST(LeaderRoundsTest, FollowersThatBeginOnTheirOwnWithinTheGraceGetNoBegin) {
  Star star(2, 2s);
  StatusOr<RoundExchange::Outcome> a = internalError("not run"), b = internalError("not run");
  std::thread fa([&] { a = star.followers[0]->exchange({4}, {}, in(5s)); });
  std::thread fb([&] {
    std::this_thread::sleep_for(300ms);  // a step's ranks drift apart
    b = star.followers[1]->exchange({4}, {}, in(5s));
  });
  const auto started = transport::Clock::now();
  auto led = star.leader->exchange({4}, {}, in(5s));
  fa.join();
  fb.join();
  ASSERT_TRUE(led.isOk() && a.isOk() && b.isOk());
  EXPECT_THAT(led->ids, ElementsAre(4));  // one round, not an empty one first
  EXPECT_LT(transport::Clock::now() - started, 1500ms);
  EXPECT_EQ(star.begins.load(), 0);
}

TEST(LeaderRoundsTest, AnIdleFollowerIsBegunAfterTheGraceAndOneStillHoldingIdsAtOnce) {
  Star star(2, 1s);
  // Round 1: follower 1 asks for id 6, which the leader's ranks are not
  // ready for; follower 2 has nothing.
  StatusOr<RoundExchange::Outcome> a = internalError("not run"), b = internalError("not run");
  std::thread fa([&] { a = star.followers[0]->exchange({6}, {}, in(5s)); });
  std::thread fb([&] {
    ASSERT_TRUE(star.followers[1]->waitForPeers(-1, in(5s)).isOk());
    b = star.followers[1]->exchange({}, {}, in(5s));
  });
  auto started = transport::Clock::now();
  auto led = star.leader->exchange({}, {}, in(5s));
  fa.join();
  fb.join();
  ASSERT_TRUE(led.isOk() && a.isOk() && b.isOk());
  EXPECT_TRUE(led->ids.empty());
  EXPECT_GE(transport::Clock::now() - started, 900ms);  // follower 2 was begun after the grace
  EXPECT_EQ(star.begins.load(), 1);
  // Round 2, begun by the leader: follower 1, which still holds id 6, is
  // begun at once; follower 2 begins on its own.
  StatusOr<bool> woke = false;
  std::thread fa2([&] {
    woke = star.followers[0]->waitForPeers(-1, in(5s));
    a = star.followers[0]->exchange({6}, {}, in(5s));
  });
  std::thread fb2([&] {
    std::this_thread::sleep_for(100ms);
    b = star.followers[1]->exchange({6}, {}, in(5s));
  });
  started = transport::Clock::now();
  led = star.leader->exchange({6}, {}, in(5s));
  fa2.join();
  fb2.join();
  ASSERT_TRUE(led.isOk() && a.isOk() && b.isOk() && woke.isOk());
  EXPECT_TRUE(*woke);
  EXPECT_THAT(led->ids, ElementsAre(6));
  EXPECT_LT(transport::Clock::now() - started, 800ms);
  EXPECT_EQ(star.begins.load(), 2);
}

TEST(LeaderRoundsTest, ANewBatchOfTheLeadersBeginsEveryFollowerAtOnce) {
  Star star(2, 10s);
  StatusOr<bool> w1 = false, w2 = false;
  std::thread f1([&] {
    w1 = star.followers[0]->waitForPeers(-1, in(5s));
    (void)star.followers[0]->exchange({}, {}, in(5s));
  });
  std::thread f2([&] {
    w2 = star.followers[1]->waitForPeers(-1, in(5s));
    (void)star.followers[1]->exchange({}, {}, in(5s));
  });
  const auto started = transport::Clock::now();
  auto led = star.leader->exchange({}, {/*sequence=*/3, 0}, in(5s));
  f1.join();
  f2.join();
  ASSERT_TRUE(led.isOk() && w1.isOk() && w2.isOk());
  EXPECT_TRUE(*w1 && *w2);
  EXPECT_EQ(led->leader_sequence, 3u);
  EXPECT_LT(transport::Clock::now() - started, 3s);
  EXPECT_EQ(star.begins.load(), 2);
}

TEST(LeaderRoundsTest, WithNothingBegunWaitForPeersEndsAtItsTime) {
  Star star(1);
  const auto started = transport::Clock::now();
  auto woke = star.leader->waitForPeers(-1, in(200ms));
  ASSERT_TRUE(woke.isOk());
  EXPECT_FALSE(*woke);
  EXPECT_GE(transport::Clock::now() - started, 190ms);
}

TEST(LeaderRoundsTest, AFollowerThatSendsNoPartIsNamedAtTheDeadline) {
  Star star(3);
  std::thread f1([&] { (void)star.followers[0]->exchange({1}, {}, in(300ms)); });
  auto led = star.leader->exchange({1}, {}, in(200ms));
  f1.join();
  ASSERT_FALSE(led.isOk());
  EXPECT_EQ(led.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(led.status().message(), HasSubstr("2 of 3 follower nodes sent no part (nodes 2, 3)"));
}

TEST(LeaderRoundsTest, AbortEndsAWaitingRound) {
  Star star(1);
  std::thread stop([&] {
    std::this_thread::sleep_for(100ms);
    star.followers[0]->abort("job 'j' failed: rank 3 left");
  });
  auto followed = star.followers[0]->exchange({1}, {}, in(10s));
  stop.join();
  ASSERT_FALSE(followed.isOk());
  EXPECT_THAT(followed.status().message(), HasSubstr("rank 3 left"));
}

TEST(LeaderRoundsTest, APartSentTwiceAbortsTheRounds) {
  LeadingRounds leader(2, [](const v1::RoundMessage&, const std::vector<int>*) {});
  v1::RoundMessage part;
  part.set_kind(v1::RoundMessage::PART);
  part.set_round(1);
  leader.deliver(part, 1);
  leader.deliver(part, 1);
  auto led = leader.exchange({}, {}, in(1s));
  ASSERT_FALSE(led.isOk());
  EXPECT_THAT(led.status().message(), HasSubstr("node 1 sent its part twice"));
}

TEST(LeaderRoundsTest, BitsRoundTrip) {
  const std::vector<uint64_t> ids = {1, 64, 65, 4096};
  const auto bits = idsToBits(ids);
  EXPECT_EQ(bits.size(), 64u);
  EXPECT_EQ(bitsToIds(bits.data(), bits.size()), ids);
  EXPECT_TRUE(idsToBits({}).empty());
  EXPECT_EQ(idsToBits({3}).size(), 1u);
}

}  // namespace
}  // namespace gradsync::peer
