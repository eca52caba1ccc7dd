// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/failure_way.h"

#include <gtest/gtest.h>

#include <vector>

#include "daemon/peer/test_node_side.h"

namespace gradsync::peer {
namespace {

// A side that records what it is asked to tell and hear. As the leader's
// does, a heard failure is passed on through the way (passOn); as a
// follower's does, it is only noted.
class RecordingSide final : public testing::QuietSide {
 public:
  explicit RecordingSide(bool leads) : leads_(leads) {}
  FailureWay* way = nullptr;
  struct Told {
    std::string text;
    bool node_lost;
    const Follower* teller;
    FailureNotices::Route route;
  };
  std::vector<Told> told;
  int heard_count = 0;

  bool leads() const override { return leads_; }
  void tell(const std::string& text, bool node_lost, const Follower* teller, FailureNotices::Route route) override {
    told.push_back({text, node_lost, teller, route});
  }
  void heard(const v1::JobFailure& failure, const Follower* teller) override {
    ++heard_count;
    if (leads_) {
      way->passOn(failure, teller);
    } else {
      way->notices().heard(failure.node_lost());
    }
  }

 private:
  const bool leads_;
};

struct Way {
  explicit Way(bool leads)
      : side(leads),
        way(
            "j", [this]() -> NodeSide& { return side; },
            [this](const FailureWay::Failure& f) { handed.push_back(f); }) {
    side.way = &way;
  }
  RecordingSide side;
  std::vector<FailureWay::Failure> handed;
  FailureWay way;
};

v1::JobFailure failure(const std::string& message, bool node_lost) {
  v1::JobFailure f;
  f.set_message(message);
  f.set_node_lost(node_lost);
  return f;
}

TEST(FailureWayTest, WhatThePeerSideDetectsIsToldOncePerKindThenHandedToTheJob) {
  Way w(/*leads=*/false);
  w.way.detected("lost node b", /*node_lost=*/true);
  w.way.detected("lost node c", /*node_lost=*/true);
  ASSERT_EQ(w.side.told.size(), 1u);
  EXPECT_EQ(w.side.told[0].text, "job 'j': lost node b");  // led by the job's name, once
  EXPECT_EQ(w.side.told[0].route, FailureNotices::Route::kThroughTheLeader);
  ASSERT_EQ(w.handed.size(), 2u);
  EXPECT_EQ(w.handed[0].cause, "lost node b");
  EXPECT_TRUE(w.handed[0].heard_from.empty());
}

TEST(FailureWayTest, AFollowerPassesOnNothingItHeard) {
  Way w(/*leads=*/false);
  w.way.heard(failure("job 'j': rank 3 left", false), "the leader a");
  EXPECT_TRUE(w.side.told.empty());
  ASSERT_EQ(w.handed.size(), 1u);
  EXPECT_EQ(w.handed[0].heard_from, "the leader a");
  // What it detects of the same kind afterwards is no news either.
  w.way.detected("rank 5 left", false);
  EXPECT_TRUE(w.side.told.empty());
  EXPECT_EQ(w.handed.size(), 1u);  // a departed rank after the failure: only logged
}

TEST(FailureWayTest, TheLeaderPassesOnWhatOneFollowerToldItToTheOthers) {
  Way w(/*leads=*/true);
  const Follower* teller = reinterpret_cast<const Follower*>(0x1);  // only compared
  w.way.heard(failure("job 'j': node c lost", true), "follower b", teller);
  ASSERT_EQ(w.side.told.size(), 1u);
  EXPECT_EQ(w.side.told[0].teller, teller);
  EXPECT_EQ(w.side.told[0].text, "job 'j': node c lost");
  ASSERT_EQ(w.handed.size(), 1u);
  EXPECT_EQ(w.handed[0].heard_from, "follower b");
}

TEST(FailureWayTest, ALostLeaderIsToldAroundIt) {
  Way w(/*leads=*/false);
  w.way.detected("rank 2 left", /*node_lost=*/false);  // told to the leader first
  w.way.leaderLost("lost the leader a");
  ASSERT_EQ(w.side.told.size(), 2u);
  EXPECT_EQ(w.side.told[1].route, FailureNotices::Route::kAroundTheLeader);
  EXPECT_TRUE(w.side.told[1].node_lost);
  EXPECT_EQ(w.handed.size(), 2u);
}

TEST(FailureWayTest, WhatTheJobDetectedIsToldAndNeverHandedBack) {
  Way w(/*leads=*/false);
  w.way.jobDetected("job 'j': rank 1 left the job", false);
  ASSERT_EQ(w.side.told.size(), 1u);
  EXPECT_EQ(w.side.told[0].text, "job 'j': rank 1 left the job");
  EXPECT_TRUE(w.handed.empty());
}

TEST(FailureWayTest, NothingIsToldOnceTheJobStoppedOrFromARemovedNode) {
  Way stopped(/*leads=*/true);
  stopped.way.jobStopped();
  stopped.way.detected("lost node b", true);
  stopped.way.heard(failure("node c lost", true), "follower b", nullptr);
  EXPECT_TRUE(stopped.side.told.empty());
  EXPECT_EQ(stopped.handed.size(), 2u);  // the job hears; it stopped already

  Way removed(/*leads=*/false);
  removed.way.notices().removed();
  removed.way.detected("this node was removed", true);
  EXPECT_TRUE(removed.side.told.empty());
  EXPECT_EQ(removed.handed.size(), 1u);
}

}  // namespace
}  // namespace gradsync::peer
