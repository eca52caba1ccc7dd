// SPDX-License-Identifier: Apache-2.0
// SteadyRounds without daemons: a fake exchange stands for the other
// daemons, a fake host for the job.
#include "daemon/server/steady_rounds.h"

#include <functional>
#include <map>

#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using Clock = SteadyRounds::Clock;

coordinator::Request request(int rank, const std::string& name, uint64_t handle, uint64_t group_id = 0) {
  coordinator::Request r;
  r.rank = rank;
  r.name = name;
  r.handle = handle;
  r.type = v1::ALLREDUCE;
  r.group_id = group_id;
  return r;
}

// The leader's response for ranks 0..3 (ranks 1 and 2 on this node).
coordinator::Response cached(const std::string& name) {
  coordinator::Response response;
  response.name = name;
  response.type = v1::ALLREDUCE;
  for (int rank = 0; rank < 4; ++rank) {
    response.ranks.push_back(rank);
    response.requests.push_back(request(rank, name, 1000 + rank));
  }
  return response;
}

// "w" is cached as id 7; nothing else is.
SteadyRounds::Cache cacheOfW() {
  SteadyRounds::Cache cache;
  cache.id = [](const coordinator::Request& r) -> uint64_t { return r.name == "w" ? 7 : 0; };
  cache.response = [](uint64_t id) -> std::optional<coordinator::Response> {
    if (id != 7) return std::nullopt;
    return cached("w");
  };
  return cache;
}

const std::function<bool(int)> kLocal = [](int rank) { return rank == 1 || rank == 2; };

std::vector<v1::NodeInfo> twoNodes() {
  std::vector<v1::NodeInfo> nodes(2);
  nodes[0].add_ranks(0);
  nodes[0].add_ranks(3);
  nodes[1].add_ranks(1);
  nodes[1].add_ranks(2);
  return nodes;
}

// The other daemons: every round agrees to what this one offers, unless
// told to fail; a peer has always begun the next round.
class FakeExchange : public peer::RoundExchange {
 public:
  StatusOr<bool> waitForPeers(int, transport::Clock::time_point) override {
    ++waits;
    return true;
  }
  StatusOr<Outcome> exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                             transport::Clock::time_point) override {
    ++round_;
    offered.push_back(ready);
    if (during) during();
    if (!aborted_with.empty()) return aborted(aborted_with);
    if (failure) return *failure;
    Outcome outcome;
    outcome.ids = ready;
    outcome.leader_sequence = leader.sequence;
    outcome.fusion_threshold_bytes = leader.fusion_threshold_bytes;
    return outcome;
  }
  void abort(const std::string& reason) override { aborted_with = reason; }
  uint64_t round() const override { return round_; }
  uint64_t messagesSent() const override { return 2 * round_; }

  std::function<void()> during;
  std::optional<Status> failure;
  std::string aborted_with;
  std::vector<std::vector<uint64_t>> offered;
  int waits = 0;

 private:
  uint64_t round_ = 0;
};

// The job: `before` runs at each look before a round (its number from 1)
// and says whether the job ended.
class FakeHost : public SteadyRounds::Host {
 public:
  explicit FakeHost(SteadyRounds* rounds) : rounds_(rounds) {}

  Look beforeRound(bool, Clock::duration) override {
    Look look;
    look.ended = before ? before(++looks) : true;
    look.led_waiting = !led.batch.empty();
    return look;
  }
  Led takeLed(bool leader) override { return leader ? std::move(led) : Led{}; }
  void runBatch(std::vector<coordinator::Response> batch, uint64_t sequence) override {
    ran.emplace_back(sequence, batch.size());
  }
  void batchFinished() override { ++finished; }
  bool runLeaderBatchesUpTo(uint64_t sequence) override {
    leader_batches_up_to.push_back(sequence);
    return true;
  }
  bool runAgreed(const std::vector<uint64_t>& ids, uint64_t, uint64_t sequence) override {
    for (auto& response : rounds_->takeRunnable(ids)) agreed.emplace_back(sequence, std::move(response));
    return true;
  }
  bool endedByTheJobsFailure(const Status& status) override {
    return job_failed && status.code() == StatusCode::kAborted;
  }
  void roundsBroke(const Status& status) override { broke.push_back(status); }
  void leaveAgreedCollectives() override { ++left_agreed; }
  void roundsEnded(std::vector<SteadyRounds::Held> held) override { left = std::move(held); }

  std::function<bool(int look)> before;
  Led led;
  bool job_failed = false;
  int looks = 0;
  int finished = 0;
  int left_agreed = 0;
  std::vector<std::pair<uint64_t, size_t>> ran;  // (sequence, responses)
  std::vector<uint64_t> leader_batches_up_to;
  std::vector<std::pair<uint64_t, coordinator::Response>> agreed;
  std::vector<Status> broke;
  std::vector<SteadyRounds::Held> left;

 private:
  SteadyRounds* rounds_;
};

SteadyRounds::Part partIn(FakeExchange* exchange, bool leader) {
  SteadyRounds::Part part;
  part.rounds = exchange;
  part.members = twoNodes();
  part.leader = leader;
  part.message_bytes = 64;
  return part;
}

TEST(SteadyRounds, HoldsNothingOutsideTheRounds) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  coordinator::Request r = request(1, "w", 11);
  EXPECT_EQ(rounds.hold(nullptr, r, kLocal), SteadyRounds::Hold::kNot);
  EXPECT_EQ(r.name, "w");  // untouched
  EXPECT_TRUE(rounds.takeAll().empty());
}

TEST(SteadyRounds, AFollowerRunsTheLeadersBatchesThenWhatEveryDaemonIsReadyFor) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  FakeExchange exchange;
  FakeHost host(&rounds);
  host.before = [&](int look) {
    if (look == 1) {
      coordinator::Request one = request(1, "w", 11), two = request(2, "w", 12), other = request(1, "x", 13);
      coordinator::Request remote = request(0, "w", 14), again = request(1, "w", 15);
      EXPECT_EQ(rounds.hold(nullptr, one, kLocal), SteadyRounds::Hold::kHeld);
      EXPECT_EQ(rounds.hold(nullptr, other, kLocal), SteadyRounds::Hold::kNot);   // not cached
      EXPECT_EQ(rounds.hold(nullptr, remote, kLocal), SteadyRounds::Hold::kNot);  // another node's rank
      EXPECT_EQ(rounds.hold(nullptr, again, kLocal), SteadyRounds::Hold::kNot);   // a second "w" of rank 1
      EXPECT_EQ(rounds.hold(nullptr, two, kLocal), SteadyRounds::Hold::kReady);
      EXPECT_TRUE(rounds.dirty());
    }
    return look > 1;
  };
  rounds.run(host, partIn(&exchange, /*leader=*/false));

  ASSERT_EQ(exchange.offered.size(), 1u);
  EXPECT_EQ(exchange.offered[0], std::vector<uint64_t>{7});
  EXPECT_EQ(exchange.waits, 0);  // something was ready: no wait for the peers
  EXPECT_EQ(host.leader_batches_up_to, std::vector<uint64_t>{0});
  ASSERT_EQ(host.agreed.size(), 1u);
  EXPECT_EQ(host.agreed[0].first, SteadyRounds::kRoundSequenceBase + 1);
  const coordinator::Response& response = host.agreed[0].second;
  ASSERT_EQ(response.requests.size(), 4u);
  EXPECT_EQ(response.requests[1]->handle, 11u);  // this node's own requests
  EXPECT_EQ(response.requests[2]->handle, 12u);
  EXPECT_TRUE(host.left.empty());
  EXPECT_FALSE(rounds.dirty());
  v1::JobInfo info;
  rounds.describe(&info);
  EXPECT_EQ(info.steady_rounds(), 1u);
  EXPECT_EQ(info.steady_round_messages(), 2u);
  EXPECT_EQ(info.steady_round_collectives(), 1u);
  EXPECT_EQ(info.steady_round_message_bytes(), 64u);
  // Over: requests go to the leader again.
  coordinator::Request late = request(1, "w", 16);
  EXPECT_EQ(rounds.hold(nullptr, late, kLocal), SteadyRounds::Hold::kNot);
}

TEST(SteadyRounds, TheLeaderRunsItsOwnBatchOfTheRoundAndFinishesIt) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  FakeExchange exchange;
  FakeHost host(&rounds);
  host.led.batch.push_back(cached("b"));
  host.led.part.sequence = 5;
  host.before = [](int look) { return look > 1; };
  rounds.run(host, partIn(&exchange, /*leader=*/true));
  ASSERT_EQ(exchange.offered.size(), 1u);  // the led batch wanted a round
  EXPECT_TRUE(exchange.offered[0].empty());
  ASSERT_EQ(host.ran.size(), 1u);
  EXPECT_EQ(host.ran[0], (std::pair<uint64_t, size_t>{5, 1}));
  EXPECT_EQ(host.finished, 1);
  EXPECT_TRUE(host.leader_batches_up_to.empty());
  EXPECT_TRUE(host.agreed.empty());
}

TEST(SteadyRounds, ABrokenRoundFailsTheJobAndWhatIsHeldEnds) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  FakeExchange exchange;
  exchange.failure = unavailable("daemon 3 is gone");
  FakeHost host(&rounds);
  host.before = [&](int look) {
    coordinator::Request one = request(1, "w", 11);
    if (look == 1) EXPECT_EQ(rounds.hold(nullptr, one, kLocal), SteadyRounds::Hold::kHeld);
    return false;
  };
  rounds.run(host, partIn(&exchange, /*leader=*/false));
  // Nothing was ready here: it waited until a peer began the round, then
  // took part with nothing.
  EXPECT_EQ(exchange.waits, 1);
  ASSERT_EQ(exchange.offered.size(), 1u);
  ASSERT_EQ(host.broke.size(), 1u);
  EXPECT_EQ(host.broke[0].message(), "daemon 3 is gone");
  EXPECT_EQ(host.left_agreed, 0);
  ASSERT_EQ(host.left.size(), 1u);  // for the job to fail
  EXPECT_EQ(host.left[0].request.handle, 11u);
}

TEST(SteadyRounds, TheJobsFailureEndsTheRoundAndLeavesWhatThePeersMayRun) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  FakeExchange exchange;
  FakeHost host(&rounds);
  // The job fails during the round: its failure aborts the rounds.
  exchange.during = [&] {
    host.job_failed = true;
    rounds.abort("job 'j': rank 3 left");
  };
  host.before = [&](int look) {
    coordinator::Request one = request(1, "w", 11), two = request(2, "w", 12);
    if (look == 1) {
      rounds.hold(nullptr, one, kLocal);
      rounds.hold(nullptr, two, kLocal);
    }
    return false;
  };
  rounds.run(host, partIn(&exchange, /*leader=*/false));
  EXPECT_EQ(exchange.aborted_with, "job 'j': rank 3 left");
  EXPECT_TRUE(host.broke.empty());  // not a broken data plane
  EXPECT_EQ(host.left_agreed, 1);   // this daemon offered id 7: a peer may run it
  EXPECT_TRUE(host.agreed.empty());
  // After the rounds, an abort reaches no exchange.
  exchange.aborted_with.clear();
  rounds.abort("later");
  EXPECT_TRUE(exchange.aborted_with.empty());
}

TEST(SteadyRounds, OverdueRequestsAndGroupsLeaveForTheLeader) {
  SteadyRounds rounds("j", std::chrono::seconds(5), cacheOfW());
  FakeExchange exchange;
  FakeHost host(&rounds);
  host.before = [&](int look) {
    if (look == 1) {
      coordinator::Request one = request(1, "w", 11);
      EXPECT_EQ(rounds.hold(nullptr, one, kLocal), SteadyRounds::Hold::kHeld);
      EXPECT_TRUE(rounds.takeOverdue(std::chrono::hours(1)).empty());
      const auto overdue = rounds.takeOverdue(Clock::duration::zero());
      EXPECT_EQ(overdue.size(), 1u);
      EXPECT_TRUE(rounds.takeGroup(99).empty());
    }
    return look > 1;
  };
  rounds.run(host, partIn(&exchange, /*leader=*/false));
  EXPECT_TRUE(host.left.empty());
}

}  // namespace
}  // namespace gradsync::server
