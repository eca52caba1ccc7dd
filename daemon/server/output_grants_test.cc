// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/output_grants.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

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

TEST(OutputGrantsTest, AnswersInKeyOrderAndTheRanksThatGaveNone) {
  OutputGrants grants;
  const std::vector<OutputGrants::Key> keys = {{0, 10}, {1, 11}, {2, 12}};
  for (const auto& key : keys) grants.expect(key);
  grants.beginWait("ag", keys, OutputGrants::Clock::now());
  EXPECT_TRUE(grants.deliver({2, 12}, grant(12, 256, 64)));
  EXPECT_TRUE(grants.deliver({0, 10}, grant(10, 0, 64)));
  EXPECT_FALSE(grants.allGranted(keys));
  EXPECT_FALSE(grants.deliver({0, 10}, grant(10, 0, 64)));  // answered already
  EXPECT_FALSE(grants.deliver({5, 10}, grant(10, 0, 64)));  // never asked
  const OutputGrants::Outcome outcome = grants.endWait(keys);
  ASSERT_EQ(outcome.answers.size(), 2u);
  EXPECT_EQ(outcome.answers[0].handle(), 10u);
  EXPECT_EQ(outcome.answers[1].handle(), 12u);
  EXPECT_EQ(outcome.waiting, std::vector<int>{1});
  EXPECT_FALSE(grants.deliver({1, 11}, grant(11, 0, 64)));  // late: the wait ended
}

TEST(OutputGrantsTest, TheWaitInProgressShowsWhoGrantedAndWhoNot) {
  OutputGrants grants;
  const auto start = OutputGrants::Clock::now();
  const std::vector<OutputGrants::Key> keys = {{0, 1}, {3, 2}};
  for (const auto& key : keys) grants.expect(key);
  v1::JobTensors none;
  grants.describe(start, &none);
  EXPECT_EQ(none.awaiting_output_size(), 0);
  grants.beginWait("gather.w", keys, start);
  ASSERT_TRUE(grants.deliver({3, 2}, grant(2, 0, 8)));
  EXPECT_FALSE(grants.allGranted(keys));
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
  ASSERT_TRUE(grants.deliver({0, 1}, grant(1, 0, 8)));
  EXPECT_TRUE(grants.allGranted(keys));
  grants.endWait(keys);
  v1::JobTensors after;
  grants.describe(start, &after);
  EXPECT_EQ(after.awaiting_output_size(), 0);
}

TEST(OutputGrantsTest, ANewEpochForgetsWhatWasAskedFor) {
  OutputGrants grants;
  grants.expect({0, 1});
  grants.clear();
  EXPECT_FALSE(grants.deliver({0, 1}, grant(1, 0, 8)));
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
