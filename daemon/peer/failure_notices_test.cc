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

}  // namespace
}  // namespace gradsync::peer
