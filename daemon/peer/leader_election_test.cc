// SPDX-License-Identifier: Apache-2.0
// A candidate's side of leader failover, without a daemon: a fake Host holds
// the membership and counts takeovers; votes are given as the Elect call's
// reactor gives them, with a callback for the answer. (Voting for another candidate over
// Elect runs in the elastic multi-daemon tests.)
#include "daemon/peer/leader_election.h"

#include <atomic>
#include <fstream>
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
  uint64_t memberCount(size_t* count) const override {
    *count = members_.size();
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
    if (refuse_takeover) return failedPrecondition("this node left epoch 4");
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
  bool refuse_takeover = false;

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

// A vote given as the Elect call's reactor gives it: its id, and its
// answer once called back.
struct GivenVote {
  uint64_t id = 0;
  std::future<StatusOr<v1::ElectResponse>> answer;
};

GivenVote give(LeaderElection& election, const v1::ElectRequest& request) {
  auto promise = std::make_shared<std::promise<StatusOr<v1::ElectResponse>>>();
  GivenVote vote;
  vote.answer = promise->get_future();
  vote.id = election.acceptVote(
      request, [promise](StatusOr<v1::ElectResponse> answer) { promise->set_value(std::move(answer)); });
  return vote;
}

StatusOr<v1::ElectResponse> answerOf(LeaderElection& election, const v1::ElectRequest& request) {
  return give(election, request).answer.get();
}

int threadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(LeaderElectionTest, TheLowestSurvivorLeadsOnceAnotherVoteJoinsItsOwn) {
  FakeHost host(3);
  LeaderElection election(options(), &host);
  // The other follower's vote comes first: it waits until this daemon lost
  // the leader too.
  GivenVote other = give(election, voteOf(2));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(election.electing(kEpoch));
  EXPECT_EQ(election.votesHeld(), 1u);
  const auto leading = election.run("lost the leader");
  ASSERT_TRUE(leading.isOk()) << leading.status().message();
  EXPECT_TRUE(leading.value());
  EXPECT_TRUE(election.electing(kEpoch));
  const auto answer = other.answer.get();
  ASSERT_TRUE(answer.isOk()) << answer.status().message();
  EXPECT_EQ(answer->change().epoch(), kEpoch + 1);
  EXPECT_EQ(answer->change().nodes_size(), 2);
  EXPECT_EQ(answer->change().node_count(), 0);  // all fit in the answer
  EXPECT_EQ(host.takeovers.load(), 1);
  // A voter late for the same epoch gets the same answer.
  const auto late = answerOf(election, voteOf(2));
  ASSERT_TRUE(late.isOk()) << late.status().message();
  EXPECT_EQ(late->change().epoch(), kEpoch + 1);
  EXPECT_EQ(host.takeovers.load(), 1);
}

TEST(LeaderElectionTest, AVoteIsRefusedWhileThisDaemonStillHearsTheLeader) {
  FakeHost host(3);
  auto o = options();
  o.limits.candidate_notice = 100ms;
  LeaderElection election(o, &host);
  const auto answer = answerOf(election, voteOf(2));
  EXPECT_EQ(answer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(answer.status().message(), HasSubstr("still hears the leader"));
  EXPECT_EQ(host.takeovers.load(), 0);
}

TEST(LeaderElectionTest, VotesOfAnotherEpochOrOutsidersOrWithoutFailoverAreRefused) {
  FakeHost host(3);
  LeaderElection election(options(), &host);
  auto stale = answerOf(election, voteOf(2, kEpoch - 1));
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("is at epoch 4, the vote is for epoch 3"));
  EXPECT_EQ(answerOf(election, voteOf(2, kEpoch, "wrong")).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(answerOf(election, voteOf(7)).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(election.votesHeld(), 0u);

  LeaderElection off(options(/*failover=*/false), &host);
  auto refused = answerOf(off, voteOf(2));
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
  GivenVote other = give(election, voteOf(2));
  std::this_thread::sleep_for(300ms);
  election.voterGone(other.id);  // its call ended: withdrawn, answered at once
  ASSERT_EQ(other.answer.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(other.answer.get().status().code(), StatusCode::kCancelled);
  // A third vote now makes two, not the three a stale one would make.
  const auto third = answerOf(election, voteOf(3));
  EXPECT_EQ(third.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(third.status().message(), HasSubstr("3 needed"));
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
  GivenVote other = give(election, voteOf(2));
  std::this_thread::sleep_for(100ms);
  const auto started = CrossClock::now();
  election.stop();
  EXPECT_EQ(other.answer.get().status().code(), StatusCode::kCancelled);
  EXPECT_LT(CrossClock::now() - started, 5s);
  EXPECT_EQ(answerOf(election, voteOf(2)).status().code(), StatusCode::kCancelled);  // later ones at once
}

// Hundreds of votes wait for the candidate to lose the leader, and then for
// its takeover, held with their answers: one thread for the election, none
// per vote; the takeover runs once, and every vote gets its answer.
TEST(LeaderElectionTest, HundredsOfVotesAreHeldWithoutAThreadEach) {
  constexpr int kDaemons = 301;  // 151 votes make the majority
  FakeHost host(kDaemons);
  auto o = options();
  o.limits.election = 10s;
  o.limits.candidate_notice = 10s;
  LeaderElection election(o, &host);
  const int threads_before = threadsOfThisProcess();
  std::vector<GivenVote> votes;
  for (int r = 2; r < kDaemons; ++r) votes.push_back(give(election, voteOf(r)));
  EXPECT_EQ(election.votesHeld(), static_cast<size_t>(kDaemons - 2));
  EXPECT_LE(threadsOfThisProcess(), threads_before + 1);  // the election's own
  const auto leading = election.run("lost the leader");
  ASSERT_TRUE(leading.isOk()) << leading.status().message();
  EXPECT_TRUE(leading.value());
  for (auto& vote : votes) {
    ASSERT_EQ(vote.answer.wait_for(5s), std::future_status::ready);
    const auto answer = vote.answer.get();
    ASSERT_TRUE(answer.isOk()) << answer.status().message();
    EXPECT_EQ(answer->change().epoch(), kEpoch + 1);
  }
  EXPECT_EQ(host.takeovers.load(), 1);
  EXPECT_EQ(election.votesHeld(), 0u);
}

// A takeover that fails (this node left the epoch) answers every vote that
// counted with why, at once: none waits out its deadline.
TEST(LeaderElectionTest, AFailedTakeoverAnswersEveryVoteAtOnce) {
  FakeHost host(5);
  host.refuse_takeover = true;
  auto o = options();
  o.limits.election = 30s;
  LeaderElection election(o, &host);
  GivenVote second = give(election, voteOf(2));
  GivenVote third = give(election, voteOf(3));
  const auto started = CrossClock::now();
  const auto leading = election.run("lost the leader");
  EXPECT_FALSE(leading.isOk());
  for (GivenVote* vote : {&second, &third}) {
    const auto answer = vote->answer.get();
    EXPECT_EQ(answer.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(answer.status().message(), HasSubstr("left epoch 4"));
  }
  EXPECT_LT(CrossClock::now() - started, 10s);
}

}  // namespace
}  // namespace gradsync::peer
