// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/reduce_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gradsync::executor {
namespace {

TEST(ReducePoolTest, RunsEveryShardExactlyOnce) {
  ReducePool pool(3);
  for (size_t shards : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<std::atomic<int>> hits(shards);
    pool.forEachShard(shards, [&](size_t i) { hits[i].fetch_add(1); });
    for (size_t i = 0; i < shards; ++i) EXPECT_EQ(hits[i].load(), 1) << "shard " << i << " of " << shards;
  }
}

TEST(ReducePoolTest, ManyPassesFromSeveralCallers) {
  ReducePool pool(2);
  std::atomic<long> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int pass = 0; pass < 200; ++pass) pool.forEachShard(10, [&](size_t i) { sum.fetch_add(i); });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 3L * 200 * 45);
}

TEST(ReducePoolTest, SingleThreadPoolRunsInline) {
  ReducePool pool(1);
  EXPECT_EQ(pool.threads(), 1);
  std::thread::id caller = std::this_thread::get_id();
  pool.forEachShard(5, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
}

}  // namespace
}  // namespace gradsync::executor
