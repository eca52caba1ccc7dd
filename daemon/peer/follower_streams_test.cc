// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/follower_streams.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A stream that counts what it was sent (and refuses once ended).
class CountingStream : public FollowerStream {
 public:
  bool send(const SharedMessage&) override {
    if (ended) return false;
    ++sent;
    return true;
  }
  int sent = 0;
  bool ended = false;
};

v1::NodeInfo node(const std::string& address, std::vector<int> ranks, int cross_rank) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  n.set_cross_rank(cross_rank);
  for (int r : ranks) n.add_ranks(r);
  return n;
}

std::vector<std::string> addresses(const std::vector<std::shared_ptr<Follower>>& followers) {
  std::vector<std::string> out;
  for (const auto& f : followers) out.push_back(f->peerAddress());
  return out;
}

// The leader a:1 (ranks 0, 1), followers b:1 (2, 3) and c:1 (4, 5), at epoch 1.
membership::EpochBook threeNodes() {
  membership::EpochBook book("j", "a:1", 0);
  book.form({node("a:1", {0, 1}, 0), node("b:1", {2, 3}, 1), node("c:1", {4, 5}, 2)}, 1);
  return book;
}

class FollowerStreamsTest : public ::testing::Test {
 protected:
  std::optional<SharedMessage> told;  // what attach says was told before (tellEveryone's test looks)
};

TEST_F(FollowerStreamsTest, AMemberAttachesOncePerCrossRankAndIsFoundByRankAndCrossRank) {
  FollowerStreams streams;
  auto b = streams.attachMember(node("b:1", {2, 3}, 1), std::make_shared<CountingStream>(), 100, &told);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(streams.attachMember(node("x:1", {2, 3}, 1), std::make_shared<CountingStream>(), 100, &told), nullptr);
  auto c = streams.attachMember(node("c:1", {4, 5}, 2), std::make_shared<CountingStream>(), 100, &told);
  ASSERT_NE(c, nullptr);

  EXPECT_EQ(streams.memberCount(), 2u);
  EXPECT_TRUE(streams.hasMember(2));
  EXPECT_FALSE(streams.hasMember(3));
  EXPECT_EQ(streams.holdingRank(5), c);
  EXPECT_EQ(streams.holdingRank(0), nullptr);  // the leader's own
  EXPECT_THAT(addresses(streams.atCrossRanks({2, 7})), ElementsAre("c:1"));
  EXPECT_THAT(addresses(streams.streams(false)), ElementsAre("b:1", "c:1"));
  EXPECT_EQ(b->crossRank(), 1);
  EXPECT_TRUE(b->stream.attached());
}

TEST_F(FollowerStreamsTest, ReachCountsAttachedMembersHeardWithinTheLimitAndNotTheLostOne) {
  FollowerStreams streams;
  auto b = streams.attachMember(node("b:1", {2}, 1), std::make_shared<CountingStream>(), 1000, &told);
  auto c = streams.attachMember(node("c:1", {3}, 2), std::make_shared<CountingStream>(), 1000, &told);
  auto d = streams.attachMember(node("d:1", {4}, 3), std::make_shared<CountingStream>(), 1000, &told);
  c->heardAt(4000);
  EXPECT_EQ(streams.reachedWithin("", 4000, 3000), 3u);
  EXPECT_EQ(streams.reachedWithin("", 4500, 3000), 1u);  // b and d silent for 3.5 s
  EXPECT_EQ(streams.reachedWithin("c:1", 4000, 3000), 2u);
  d->stream.detach();
  EXPECT_EQ(streams.reachedWithin("", 4000, 3000), 2u);
  EXPECT_EQ(streams.heardAgeMs(2, 4500), 500);
  EXPECT_EQ(streams.heardAgeMs(9, 4500), -1);
  (void)b;
}

TEST_F(FollowerStreamsTest, ACandidateAttachesOnlyOnceItJoinedAndOnce) {
  FollowerStreams streams;
  EXPECT_EQ(streams.attachCandidate("d:1", std::make_shared<CountingStream>(), 0, &told), nullptr);  // never joined
  streams.addCandidate(node("d:1", {}, 5));
  auto d = streams.attachCandidate("d:1", std::make_shared<CountingStream>(), 0, &told);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->crossRank(), -1);  // no place in the ring yet
  EXPECT_EQ(streams.attachCandidate("d:1", std::make_shared<CountingStream>(), 0, &told), nullptr);
  EXPECT_THAT(streams.streams(false), IsEmpty());
  EXPECT_THAT(addresses(streams.streams(true)), ElementsAre("d:1"));

  streams.addCandidate(node("d:1", {}, -1));  // joined again: replaces the first
  EXPECT_FALSE(streams.dropCandidate(d.get()));
  auto again = streams.attachCandidate("d:1", std::make_shared<CountingStream>(), 0, &told);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(streams.dropCandidate(again.get()));
  EXPECT_THAT(streams.streams(true), IsEmpty());
}

TEST_F(FollowerStreamsTest, ANewEpochRenumbersTheKeptRemovesTheLostAndAdmitsCandidates) {
  membership::EpochBook book = threeNodes();
  FollowerStreams streams;
  auto b = streams.attachMember(book.members()[1], std::make_shared<CountingStream>(), 0, &told);
  auto c = streams.attachMember(book.members()[2], std::make_shared<CountingStream>(), 0, &told);
  ASSERT_TRUE(book.addCandidate(node("d:1", {}, -1)).isOk());
  streams.addCandidate(node("d:1", {}, -1));
  auto d = streams.attachCandidate("d:1", std::make_shared<CountingStream>(), 0, &told);
  ASSERT_NE(d, nullptr);
  book.addJoiner({"d:1", 7, 70});

  ASSERT_TRUE(book.lose({2, 3}, 1, "node b:1 went silent").isOk());
  FollowerStreams::Renumbered lost = streams.renumber(book);
  EXPECT_THAT(addresses(lost.kept), ElementsAre("c:1"));  // d's ranks wait for a commit
  ASSERT_EQ(lost.removed.size(), 1u);
  EXPECT_EQ(lost.removed[0].first, b);
  EXPECT_THAT(lost.removed[0].second, HasSubstr("node b:1 went silent"));
  EXPECT_EQ(b->removed(), lost.removed[0].second);  // its session refuses what it says from now on
  EXPECT_EQ(c->crossRank(), 1);
  EXPECT_EQ(streams.holdingRank(2), c);  // renumbered: c's ranks are 2 and 3 now
  EXPECT_FALSE(streams.hasMember(2));

  ASSERT_TRUE(book.admit({}, "at the commit 'x'").isOk());
  FollowerStreams::Renumbered admitted = streams.renumber(book);
  EXPECT_THAT(addresses(admitted.kept), ElementsAre("c:1", "d:1"));
  EXPECT_THAT(admitted.removed, IsEmpty());
  EXPECT_EQ(d->crossRank(), 2);
  EXPECT_THAT(addresses(streams.streams(true)), ElementsAre("c:1", "d:1"));  // no candidate left
  EXPECT_TRUE(c->removed().empty());
}

TEST_F(FollowerStreamsTest, AfterATakeoverTheMembersWhoseStreamsDoNotOpenWithinTheLimitAreAbsent) {
  const std::vector<v1::NodeInfo> members = {node("a:1", {0}, 0), node("b:1", {1}, 1), node("c:1", {2}, 2)};
  FollowerStreams streams;
  streams.attachMember(members[1], std::make_shared<CountingStream>(), 0, &told);
  EXPECT_THAT(streams.absentSinceTakeover(members, 100000, 6000), IsEmpty());  // led from the start
  streams.takeOver(10000);
  EXPECT_EQ(streams.memberCount(), 0u);  // the old leader's followers open their streams anew
  auto b = streams.attachMember(members[1], std::make_shared<CountingStream>(), 11000, &told);
  ASSERT_NE(b, nullptr);
  EXPECT_THAT(streams.absentSinceTakeover(members, 16000, 6000), IsEmpty());  // within the limit
  const std::vector<v1::NodeInfo> absent = streams.absentSinceTakeover(members, 16001, 6000);
  ASSERT_EQ(absent.size(), 1u);
  EXPECT_EQ(absent[0].peer_address(), "c:1");
  streams.resumedAt(15000);  // this daemon was paused: its clock restarts
  EXPECT_THAT(streams.absentSinceTakeover(members, 20000, 6000), IsEmpty());
  EXPECT_EQ(streams.silentMs(*b, 20000), 5000);
  b->heardAt(19000);
  EXPECT_EQ(streams.silentMs(*b, 20000), 1000);
}

TEST_F(FollowerStreamsTest, AFailureToldToEveryoneReachesEachStreamButTheTellersAndThoseAttachingLater) {
  FollowerStreams streams;
  auto b_stream = std::make_shared<CountingStream>();
  auto c_stream = std::make_shared<CountingStream>();
  auto d_stream = std::make_shared<CountingStream>();
  std::optional<SharedMessage> before;
  auto b = streams.attachMember(node("b:1", {1}, 1), b_stream, 0, &before);
  EXPECT_FALSE(before.has_value());
  streams.attachMember(node("c:1", {2}, 2), c_stream, 0, &before);
  streams.addCandidate(node("d:1", {}, -1));
  streams.attachCandidate("d:1", d_stream, 0, &before);
  v1::LeaderMessage failure;
  failure.mutable_failure()->set_message("node e:1 lost");
  streams.tellEveryone(share(failure), b.get());  // b told the leader
  EXPECT_EQ(b_stream->sent, 0);
  EXPECT_EQ(c_stream->sent, 1);
  EXPECT_EQ(d_stream->sent, 1);  // a candidate's new ranks would wait in vain
  std::optional<SharedMessage> later;
  ASSERT_NE(streams.attachMember(node("e:1", {3}, 3), std::make_shared<CountingStream>(), 0, &later), nullptr);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->message->failure().message(), "node e:1 lost");
}

}  // namespace
}  // namespace gradsync::peer
