// SPDX-License-Identifier: Apache-2.0
// A candidate's side of leader failover, without a daemon: a fake Host holds
// the membership and counts takeovers. (Voting for another candidate over
// Elect runs in the elastic multi-daemon tests.)
#include "daemon/peer/leader_election.h"

#include <atomic>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint64_t kEpoch = 4;

// Daemons on loopback ports nothing listens on: probes fail at once.
std::string address(int cross_rank) { return "127.0.0.1:" + std::to_string(9 + cross_rank); }

class FakeHost : public LeaderElection::Host {
 public:
  explicit FakeHost(int daemons) {
    for (int r = 0; r < daemons; ++r) {
      v1::NodeInfo node;
      node.set_peer_address(address(r));
      node.set_cross_rank(r);
      members_.push_back(node);
    }
  }
  uint64_t membership(std::vector<v1::NodeInfo>* members) const override {
    *members = members_;
    return kEpoch;
  }
  bool isMember(const std::string& a) const override {
    for (const auto& node : members_) {
      if (node.peer_address() == a) return true;
    }
    return false;
  }
  bool leads() const override { return takeovers.load() > 0; }
  StatusOr<v1::NewEpoch> takeOver(uint64_t epoch) override {
    EXPECT_EQ(epoch, kEpoch);
    takeovers.fetch_add(1);
    v1::NewEpoch change;
    change.set_epoch(epoch + 1);
    for (size_t i = 1; i < members_.size(); ++i) *change.add_nodes() = members_[i];
    return change;
  }
  Status followElected(const v1::NodeInfo&, const std::shared_ptr<grpc::Channel>&, v1::ElectResponse) override {
    ADD_FAILURE() << "no other candidate is reachable here";
    return internalError("unreachable");
  }
  std::atomic<int> takeovers{0};

 private:
  std::vector<v1::NodeInfo> members_;
};

LeaderElection::Options options(bool failover = true) {
  LeaderElection::Options o;
  o.job_id = "j";
  o.token = "t";
  o.self_address = address(1);  // the lowest follower: the first candidate
  o.failover = failover;
  o.membership_part_bytes = 1 << 20;
  o.limits.election = 1s;
  o.limits.candidate_notice = 2s;
  o.limits.voting = 3s;
  o.limits.probe = 200ms;
  return o;
}

v1::ElectRequest voteOf(int cross_rank, uint64_t epoch = kEpoch, const std::string& token = "t") {
  v1::ElectRequest request;
  request.set_job_id("j");
  request.set_token(token);
  request.set_epoch(epoch);
  request.set_voter_address(address(cross_rank));
  return request;
}

const auto kWaiting = [] { return true; };

TEST(LeaderElectionTest, TheLowestSurvivorLeadsOnceAnotherVoteJoinsItsOwn) {
  FakeHost host(3);
  LeaderElection election(options(), &host);
  // The other follower's vote comes first: it waits until this daemon lost
  // the leader too.
  auto other = std::async(std::launch::async, [&] { return election.acceptVote(voteOf(2), kWaiting); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(election.electing(kEpoch));
  const auto leading = election.run("lost the leader");
  ASSERT_TRUE(leading.isOk()) << leading.status().message();
  EXPECT_TRUE(leading.value());
  EXPECT_TRUE(election.electing(kEpoch));
  const auto answer = other.get();
  ASSERT_TRUE(answer.isOk()) << answer.status().message();
  EXPECT_EQ(answer->change().epoch(), kEpoch + 1);
  EXPECT_EQ(answer->change().nodes_size(), 2);
  EXPECT_EQ(answer->change().node_count(), 0);  // all fit in the answer
  EXPECT_EQ(host.takeovers.load(), 1);
  // A voter late for the same epoch gets the same answer.
  const auto late = election.acceptVote(voteOf(2), kWaiting);
  ASSERT_TRUE(late.isOk()) << late.status().message();
  EXPECT_EQ(late->change().epoch(), kEpoch + 1);
  EXPECT_EQ(host.takeovers.load(), 1);
}

TEST(LeaderElectionTest, AVoteIsRefusedWhileThisDaemonStillHearsTheLeader) {
  FakeHost host(3);
  auto o = options();
  o.limits.candidate_notice = 100ms;
  LeaderElection election(o, &host);
  const auto answer = election.acceptVote(voteOf(2), kWaiting);
  EXPECT_EQ(answer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(answer.status().message(), HasSubstr("still hears the leader"));
  EXPECT_EQ(host.takeovers.load(), 0);
}

TEST(LeaderElectionTest, VotesOfAnotherEpochOrOutsidersOrWithoutFailoverAreRefused) {
  FakeHost host(3);
  LeaderElection election(options(), &host);
  auto stale = election.acceptVote(voteOf(2, kEpoch - 1), kWaiting);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("is at epoch 4, the vote is for epoch 3"));
  EXPECT_EQ(election.acceptVote(voteOf(2, kEpoch, "wrong"), kWaiting).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(election.acceptVote(voteOf(7), kWaiting).status().code(), StatusCode::kPermissionDenied);

  LeaderElection off(options(/*failover=*/false), &host);
  auto refused = off.acceptVote(voteOf(2), kWaiting);
  EXPECT_THAT(refused.status().message(), HasSubstr("--leader-failover off"));
  EXPECT_FALSE(off.electing(kEpoch));
  EXPECT_EQ(host.takeovers.load(), 0);
}

TEST(LeaderElectionTest, TwoDaemonsHaveNoMajorityToFailOverWith) {
  FakeHost host(2);
  LeaderElection election(options(), &host);
  const auto leading = election.run("lost the leader");
  EXPECT_EQ(leading.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(leading.status().message(), HasSubstr("no failover: a majority needs three or more daemons"));
}

TEST(LeaderElectionTest, AVoterThatGaveUpDoesNotCountAndNoMajorityFailsTheElectionByName) {
  FakeHost host(5);  // three votes needed
  LeaderElection election(options(), &host);
  auto run = std::async(std::launch::async, [&] { return election.run("lost the leader"); });
  std::atomic<bool> waiting{true};
  auto other =
      std::async(std::launch::async, [&] { return election.acceptVote(voteOf(2), [&] { return waiting.load(); }); });
  std::this_thread::sleep_for(300ms);
  waiting = false;  // its call ended: withdrawn
  const auto answer = other.get();
  EXPECT_EQ(answer.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(answer.status().message(), HasSubstr("3 needed"));
  // A third vote now makes two, not the three a stale one would make.
  const auto third = election.acceptVote(voteOf(3), kWaiting);
  EXPECT_EQ(third.status().code(), StatusCode::kDeadlineExceeded);
  const auto leading = run.get();
  EXPECT_EQ(leading.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(leading.status().message(), HasSubstr("this daemon lost the majority"));
  EXPECT_THAT(leading.status().message(), HasSubstr("3 of the job's 5 daemons' votes"));
  EXPECT_EQ(host.takeovers.load(), 0);
}

TEST(LeaderElectionTest, StoppingEndsAWaitingVote) {
  FakeHost host(3);
  auto o = options();
  o.limits.candidate_notice = 30s;
  LeaderElection election(o, &host);
  auto other = std::async(std::launch::async, [&] { return election.acceptVote(voteOf(2), kWaiting); });
  std::this_thread::sleep_for(100ms);
  const auto started = CrossClock::now();
  election.stop();
  const auto answer = other.get();
  EXPECT_EQ(answer.status().code(), StatusCode::kCancelled);
  EXPECT_LT(CrossClock::now() - started, 5s);
}

}  // namespace
}  // namespace gradsync::peer
