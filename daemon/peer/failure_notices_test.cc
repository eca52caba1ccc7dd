// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/failure_notices.h"

#include <gtest/gtest.h>

namespace gradsync::peer {
namespace {

using Verdict = FailureNotices::Verdict;

TEST(FailureNoticesTest, EachKindIsToldOnceAndALostNodeIsNewsAfterADepartedRank) {
  FailureNotices notices;
  EXPECT_EQ(notices.tell(/*node_lost=*/false), Verdict::kTell);
  EXPECT_EQ(notices.tell(false), Verdict::kToldAlready);
  EXPECT_FALSE(notices.nodeLost());
  EXPECT_EQ(notices.tell(true), Verdict::kTell);
  EXPECT_TRUE(notices.nodeLost());
  EXPECT_EQ(notices.tell(true), Verdict::kToldAlready);
  EXPECT_EQ(notices.tell(false), Verdict::kToldAlready);
}

TEST(FailureNoticesTest, AFailureIsKnownOnceToldOrHeard) {
  FailureNotices told, heard;
  EXPECT_FALSE(told.failureKnown());
  told.tell(/*node_lost=*/false);
  EXPECT_TRUE(told.failureKnown());
  heard.heard(/*node_lost=*/false);
  EXPECT_TRUE(heard.failureKnown());
}

TEST(FailureNoticesTest, ALostNodeToldFirstCoversADepartedRankAfterIt) {
  FailureNotices notices;
  EXPECT_EQ(notices.tell(true), Verdict::kTell);
  EXPECT_EQ(notices.tell(false), Verdict::kToldAlready);
}

TEST(FailureNoticesTest, WhatWasHeardFromANodeThatToldEveryOtherIsNotToldAgain) {
  FailureNotices notices;
  notices.heard(/*node_lost=*/false);
  EXPECT_EQ(notices.tell(false), Verdict::kToldAlready);
  EXPECT_FALSE(notices.nodeLost());
  EXPECT_EQ(notices.tell(true), Verdict::kTell);  // news all the same

  FailureNotices lost;
  lost.heard(true);
  EXPECT_TRUE(lost.nodeLost());
  EXPECT_EQ(lost.tell(true), Verdict::kToldAlready);
  EXPECT_EQ(lost.tell(false), Verdict::kToldAlready);
}

TEST(FailureNoticesTest, ARemovedNodeTellsNothingAndSaysSoOnce) {
  FailureNotices notices;
  notices.removed();
  EXPECT_EQ(notices.tell(true), Verdict::kRemoved);
  EXPECT_EQ(notices.tell(true), Verdict::kToldAlready);
  EXPECT_EQ(notices.tell(false), Verdict::kToldAlready);
  EXPECT_FALSE(notices.nodeLost()) << "nothing was told";
}

TEST(FailureNoticesTest, TheJobStoppingEndsTheNewsButNotWhatTheJobItselfTells) {
  FailureNotices notices;
  EXPECT_TRUE(notices.jobRunning());
  notices.jobStopped();
  EXPECT_FALSE(notices.jobRunning());
  // (A daemon stopping tells the others that its node is gone.)
  EXPECT_EQ(notices.tell(true), Verdict::kTell);
}

TEST(FailureNoticesTest, ALeaderLostAfterBeingToldIsToldAroundOnce) {
  using Route = FailureNotices::Route;
  FailureNotices notices;
  EXPECT_EQ(notices.tell(/*node_lost=*/true), Verdict::kTell);  // to the leader
  EXPECT_EQ(notices.tell(true, Route::kAroundTheLeader), Verdict::kTell);
  EXPECT_EQ(notices.tell(true, Route::kAroundTheLeader), Verdict::kToldAlready);
  EXPECT_EQ(notices.tell(true), Verdict::kToldAlready);

  FailureNotices around_first;
  EXPECT_EQ(around_first.tell(true, Route::kAroundTheLeader), Verdict::kTell);
  EXPECT_TRUE(around_first.nodeLost());
  EXPECT_EQ(around_first.tell(true), Verdict::kToldAlready) << "the leader was told with the followers";
  EXPECT_EQ(around_first.tell(false), Verdict::kToldAlready);
}

TEST(FailureNoticesTest, ALostNodeHeardOfIsNotToldAroundTheLeader) {
  using Route = FailureNotices::Route;
  FailureNotices lost;
  lost.heard(/*node_lost=*/true);
  EXPECT_EQ(lost.tell(true, Route::kAroundTheLeader), Verdict::kToldAlready);

  FailureNotices departed;  // a departed rank heard of: losing the leader is news
  departed.heard(/*node_lost=*/false);
  EXPECT_EQ(departed.tell(true, Route::kAroundTheLeader), Verdict::kTell);

  FailureNotices removed;
  removed.removed();
  EXPECT_EQ(removed.tell(true, Route::kAroundTheLeader), Verdict::kRemoved);
}

}  // namespace
}  // namespace gradsync::peer
