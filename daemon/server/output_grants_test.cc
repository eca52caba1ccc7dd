// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/output_grants.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;

v1::OutputGrant grant(uint64_t handle, uint64_t offset, uint64_t length) {
  v1::OutputGrant g;
  g.set_handle(handle);
  g.set_offset(offset);
  g.set_length(length);
  return g;
}

using Ask = OutputGrants::Ask;
using namespace std::chrono_literals;

const std::vector<Ask> kAsks = {{0, 10, 100}, {1, 11, 101}, {2, 12, 102}};

TEST(OutputGrantsTest, AnswersInTheOrderAskedOnceEveryRankAnswered) {
  OutputGrants grants;
  ASSERT_TRUE(grants.begin("ag", kAsks, 1, true, OutputGrants::Clock::now()).isOk());
  EXPECT_TRUE(grants.deliver(2, 12, grant(12, 256, 64)));
  EXPECT_TRUE(grants.deliver(0, 10, grant(10, 0, 64)));
  EXPECT_FALSE(grants.deliver(0, 10, grant(10, 0, 64)));  // answered already
  EXPECT_FALSE(grants.deliver(5, 10, grant(10, 0, 64)));  // never asked
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    grants.deliver(1, 11, grant(11, 128, 64));
  });
  auto answers = grants.await(kAsks, 1, true, 10s, "job 'j': ");
  late.join();
  ASSERT_TRUE(answers.isOk()) << answers.status().toString();
  ASSERT_EQ(answers->size(), 3u);
  EXPECT_EQ((*answers)[0].handle(), 10u);
  EXPECT_EQ((*answers)[1].handle(), 11u);
  EXPECT_EQ((*answers)[2].offset(), 256u);
  EXPECT_FALSE(grants.deliver(1, 11, grant(11, 0, 64)));  // late: the wait ended
}

TEST(OutputGrantsTest, AWaitPastItsTimeNamesTheRanksThatGaveNone) {
  OutputGrants grants;
  ASSERT_TRUE(grants.begin("ag", kAsks, 1, true, OutputGrants::Clock::now()).isOk());
  grants.deliver(1, 11, grant(11, 0, 64));
  auto answers = grants.await(kAsks, 1, true, 100ms, "job 'j' tensor 'ag': ");
  EXPECT_EQ(answers.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(answers.status().message(),
            "job 'j' tensor 'ag': ranks [0, 2] did not answer the output request within 0 s");
}

TEST(OutputGrantsTest, ASessionThatLeavesEndsTheWaitAtOnceNamingIt) {
  OutputGrants grants;
  ASSERT_TRUE(grants.begin("ag", kAsks, 1, true, OutputGrants::Clock::now()).isOk());
  grants.sessionLeft(999, "another job's rank");  // not asked: no effect
  std::thread leaves([&] {
    std::this_thread::sleep_for(50ms);
    grants.sessionLeft(101, "rank 1 (pid 42, host a) disconnected");
  });
  const auto start = std::chrono::steady_clock::now();
  auto answers = grants.await(kAsks, 1, false, 30s, "p: ");
  leaves.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(answers.status().code(), StatusCode::kAborted);
  EXPECT_EQ(answers.status().message(), "p: rank 1 (pid 42, host a) disconnected before answering the output request");
  // A later wait that asks the same session ends before it starts.
  EXPECT_EQ(grants.begin("ag2", kAsks, 1, false, OutputGrants::Clock::now()).code(), StatusCode::kAborted);
}

TEST(OutputGrantsTest, AFailureEndsOnlyTheWaitsThatAskForItAStopAndAnEpochEndEvery) {
  OutputGrants grants;
  grants.failed("rank 7 died elsewhere");
  EXPECT_EQ(grants.begin("ag", kAsks, 1, true, OutputGrants::Clock::now()).message(), "rank 7 died elsewhere");
  ASSERT_TRUE(grants.begin("ag", kAsks, 1, false, OutputGrants::Clock::now()).isOk());
  // Across daemons a failure elsewhere does not end a negotiated wait.
  EXPECT_EQ(grants.await(kAsks, 1, false, 50ms, "").status().code(), StatusCode::kDeadlineExceeded);
  auto failed = grants.await(kAsks, 1, true, 30s, "p: ");
  EXPECT_EQ(failed.status().message(), "p: rank 7 died elsewhere");

  OutputGrants moved;
  moved.newEpoch(3);
  EXPECT_EQ(moved.await(kAsks, 2, false, 30s, "").status().message(), "the elastic job moved to epoch 3");

  OutputGrants stopped;
  stopped.stopping();
  EXPECT_EQ(stopped.await(kAsks, 1, false, 30s, "").status().code(), StatusCode::kUnavailable);
}

TEST(OutputGrantsTest, TheWaitInProgressShowsWhoGrantedAndWhoNot) {
  OutputGrants grants;
  const auto start = OutputGrants::Clock::now();
  const std::vector<Ask> asks = {{0, 1, 100}, {3, 2, 103}};
  v1::JobTensors none;
  grants.describe(start, &none);
  EXPECT_EQ(none.awaiting_output_size(), 0);
  ASSERT_TRUE(grants.begin("gather.w", asks, 1, true, start).isOk());
  ASSERT_TRUE(grants.deliver(3, 2, grant(2, 0, 8)));
  v1::JobTensors out;
  grants.describe(start + std::chrono::seconds(4), &out);
  ASSERT_EQ(out.awaiting_output_size(), 1);
  EXPECT_EQ(out.awaiting_output(0).name(), "gather.w");
  EXPECT_DOUBLE_EQ(out.awaiting_output(0).age_seconds(), 4.0);
  EXPECT_EQ(
      std::vector<int>(out.awaiting_output(0).granted_ranks().begin(), out.awaiting_output(0).granted_ranks().end()),
      std::vector<int>{3});
  EXPECT_EQ(
      std::vector<int>(out.awaiting_output(0).waiting_ranks().begin(), out.awaiting_output(0).waiting_ranks().end()),
      std::vector<int>{0});
  ASSERT_TRUE(grants.deliver(0, 1, grant(1, 0, 8)));
  ASSERT_TRUE(grants.await(asks, 1, true, 1s, "").isOk());
  v1::JobTensors after;
  grants.describe(start, &after);
  EXPECT_EQ(after.awaiting_output_size(), 0);
}

TEST(OutputGrantsTest, ANewEpochForgetsWhatWasAskedFor) {
  OutputGrants grants;
  ASSERT_TRUE(grants.begin("ag", kAsks, 1, true, OutputGrants::Clock::now()).isOk());
  grants.newEpoch(2);
  EXPECT_FALSE(grants.deliver(0, 10, grant(10, 0, 8)));
}

TEST(OutputGrantsTest, APointerOnlyInsideTheArenaForTheLengthAsked) {
  UniqueFd fd(::memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(fd.get(), 4096), 0);
  ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto arena = handoff::ShmArena::map(std::move(fd), 1 << 20);
  ASSERT_TRUE(arena.isOk());
  auto ok = OutputGrants::pointer("rank 1", arena->get(), grant(7, 1024, 64), 64);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_NE(*ok, nullptr);

  auto wrong_length = OutputGrants::pointer("rank 1", arena->get(), grant(7, 1024, 32), 64);
  EXPECT_EQ(wrong_length.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_length.status().message(), HasSubstr("rank 1 granted 32 bytes of output, 64 were requested"));

  EXPECT_FALSE(OutputGrants::pointer("rank 1", arena->get(), grant(7, 4090, 64), 64).isOk());  // past the end
  EXPECT_FALSE(OutputGrants::pointer("rank 1", arena->get(), grant(7, ~uint64_t{0} - 8, 64), 64).isOk());

  v1::OutputGrant refused = grant(7, 0, 0);
  refused.set_error("arena full");
  auto full = OutputGrants::pointer("rank 1", arena->get(), refused, 64);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("could not reserve 64 bytes of output: arena full"));

  EXPECT_EQ(OutputGrants::pointer("rank 1", nullptr, grant(7, 0, 64), 64).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradsync::server
