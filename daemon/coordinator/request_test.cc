// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/request.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradsync::coordinator {
namespace {

Request requestOf(int rank, uint64_t handle) {
  Request r;
  r.rank = rank;
  r.name = "a.rather.long.tensor.name.that.does.not.fit.in.place";
  r.shape = {4, 4};
  r.handle = handle;
  return r;
}

RequestList listOf(int ranks) {
  RequestList list;
  for (int r = 0; r < ranks; ++r) list.push_back(requestOf(r, 100 + r));
  return list;
}

std::vector<uint64_t> handles(const RequestList& list) {
  std::vector<uint64_t> out;
  for (const auto& entry : list) out.push_back(entry ? entry->handle : 0);
  return out;
}

TEST(RequestListTest, ACopyChangesItsOwnEntriesAndLeavesTheOriginalAlone) {
  const RequestList cached = listOf(4);
  RequestList step = cached;
  step.set(2, requestOf(2, 7));
  step.mutableAt(0)->handle = 5;
  step.set(3, std::nullopt);
  EXPECT_EQ(handles(step), (std::vector<uint64_t>{5, 101, 7, 0}));
  EXPECT_EQ(handles(cached), (std::vector<uint64_t>{100, 101, 102, 103}));
  EXPECT_EQ(step[1]->name, cached[1]->name);
  // A copy of the copy keeps its changes, and changes of its own stay its own.
  RequestList next = step;
  next.mutableAt(2)->handle = 9;
  EXPECT_EQ(handles(next), (std::vector<uint64_t>{5, 101, 9, 0}));
  EXPECT_EQ(handles(step), (std::vector<uint64_t>{5, 101, 7, 0}));
}

TEST(RequestListTest, AListNoOtherCopySharesChangesInPlace) {
  RequestList list = listOf(3);
  const Request* before = &*list[1];
  list.mutableAt(1)->handle = 42;
  EXPECT_EQ(&*list[1], before);
  EXPECT_EQ(list[1]->handle, 42u);
  {
    RequestList copy = list;
    list.mutableAt(1)->handle = 43;  // shared now: beside it
    EXPECT_NE(&*list[1], before);
    EXPECT_EQ(copy[1]->handle, 42u);
  }
  list.mutableAt(0)->handle = 44;  // the copy is gone: in place again
  EXPECT_EQ(handles(list), (std::vector<uint64_t>{44, 43, 102}));
}

TEST(RequestListTest, AppendingToACopyWithChangesKeepsThem) {
  const RequestList cached = listOf(2);
  RequestList grown = cached;
  grown.set(1, requestOf(1, 11));
  grown.push_back(requestOf(2, 12));
  grown.emplace_back();
  EXPECT_EQ(handles(grown), (std::vector<uint64_t>{100, 11, 12, 0}));
  EXPECT_EQ(handles(cached), (std::vector<uint64_t>{100, 101}));
  for (auto& entry : grown.mutableAll()) {
    if (entry) entry->handle += 1;
  }
  EXPECT_EQ(handles(grown), (std::vector<uint64_t>{101, 12, 13, 0}));
  EXPECT_EQ(handles(cached), (std::vector<uint64_t>{100, 101}));
}

TEST(RequestListTest, BuildsLikeAVector) {
  RequestList list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.begin(), list.end());
  list.resize(3);
  list.set(1, requestOf(1, 1));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_FALSE(list[0].has_value());
  RequestList braced{requestOf(0, 1), std::nullopt};
  EXPECT_EQ(handles(braced), (std::vector<uint64_t>{1, 0}));
}

}  // namespace
}  // namespace gradsync::coordinator
