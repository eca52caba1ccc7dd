// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/job_stats.h"

#include <cmath>

#include "gtest/gtest.h"

namespace gradsync::metrics {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(JobStats, CountsLatencyAndQueueTimePerCollective) {
  JobStats stats;
  const auto t0 = JobStats::Clock::now();
  stats.done(v1::ALLREDUCE, v1::FLOAT32, 4096, t0, t0 + microseconds(20), t0 + microseconds(30));
  stats.done(v1::ALLREDUCE, v1::FLOAT32, 4096, t0, t0 + milliseconds(1), t0 + milliseconds(3));
  stats.done(v1::ALLREDUCE, v1::FLOAT16, 100, t0, t0, t0 + milliseconds(40));
  stats.done(v1::BROADCAST, v1::INT64, 8, t0, t0, t0 + seconds(100));
  v1::JobInfo info;
  stats.fill(&info);
  ASSERT_EQ(info.collective_stats_size(), 3);
  int float32 = -1;
  for (int i = 0; i < 3; ++i) {
    if (info.collective_stats(i).dtype() == v1::FLOAT32) float32 = i;
  }
  ASSERT_GE(float32, 0);
  EXPECT_EQ(info.collective_stats(float32).operations(), 2u);
  EXPECT_EQ(info.collective_stats(float32).bytes(), 8192u);
  ASSERT_EQ(info.latency_size(), 2);
  const v1::Histogram& allreduce = info.latency(0).seconds();
  EXPECT_EQ(info.latency(0).type(), v1::ALLREDUCE);
  EXPECT_EQ(allreduce.count(), 3u);
  EXPECT_NEAR(allreduce.sum(), 30e-6 + 3e-3 + 40e-3, 1e-9);
  ASSERT_EQ(allreduce.counts_size(), allreduce.upper_bounds_size() + 1);
  // 30 us lands in the 50 us bucket (above 25 us), 3 ms in 5 ms, 40 ms in 50 ms.
  auto bucket_of = [&](double bound) {
    for (int i = 0; i < allreduce.upper_bounds_size(); ++i) {
      if (std::abs(allreduce.upper_bounds(i) - bound) < 1e-12) return allreduce.counts(i);
    }
    return uint64_t{999};
  };
  EXPECT_EQ(bucket_of(50e-6), 1u);
  EXPECT_EQ(bucket_of(5e-3), 1u);
  EXPECT_EQ(bucket_of(50e-3), 1u);
  const v1::Histogram& broadcast = info.latency(1).seconds();
  EXPECT_EQ(broadcast.counts(broadcast.counts_size() - 1), 1u);  // 100 s: above every bound
  EXPECT_NEAR(info.queued_seconds(), 20e-6 + 1e-3, 1e-9);
  EXPECT_EQ(info.bytes_done(), 8192u + 100u + 8u);
}

TEST(JobStats, TotalsCountCollectivesErrorsAndFusedResponses) {
  JobStats stats;
  stats.collectiveDone();
  stats.collectiveDone();
  stats.failed(StatusCode::kAborted, "job 'j': rank 1 left");
  stats.failed(StatusCode::kResourceExhausted);  // no message: the last error stays
  stats.fused(10);
  v1::JobInfo info;
  stats.fill(&info);
  EXPECT_EQ(info.operations_done(), 2u);
  EXPECT_EQ(info.errors(), 2u);
  EXPECT_EQ(info.last_error(), "job 'j': rank 1 left");
  EXPECT_EQ(info.fused_responses(), 1u);
}

TEST(JobStats, PhasesNestAndErrorsCountByCause) {
  JobStats stats;
  const auto t0 = JobStats::Clock::now();
  stats.phase("MEMCPY_IN_FUSION_BUFFER", true, t0);
  stats.phase("REDUCE", true, t0 + milliseconds(1));
  stats.phase("REDUCE", false, t0 + milliseconds(3));
  stats.phase("MEMCPY_IN_FUSION_BUFFER", false, t0 + milliseconds(4));
  stats.phase("NEVER_OPENED", false, t0 + milliseconds(4));  // ignored
  stats.failed(StatusCode::kDeadlineExceeded);
  stats.failed(StatusCode::kDeadlineExceeded);
  stats.failed(StatusCode::kAborted);
  stats.fused(1000);
  stats.fused(1 << 20);
  v1::JobInfo info;
  stats.fill(&info);
  ASSERT_EQ(info.phases_size(), 2);
  EXPECT_EQ(info.phases(0).name(), "MEMCPY_IN_FUSION_BUFFER");
  EXPECT_NEAR(info.phases(0).seconds(), 4e-3, 1e-9);
  EXPECT_EQ(info.phases(1).name(), "REDUCE");
  EXPECT_NEAR(info.phases(1).seconds(), 2e-3, 1e-9);
  EXPECT_EQ(info.phases(1).count(), 1u);
  ASSERT_EQ(info.errors_by_cause_size(), 2);
  EXPECT_EQ(info.errors_by_cause(0).cause(), "DEADLINE_EXCEEDED");
  EXPECT_EQ(info.errors_by_cause(0).count(), 2u);
  EXPECT_EQ(info.errors_by_cause(1).cause(), "ABORTED");
  EXPECT_EQ(info.fused_response_bytes().count(), 2u);
  EXPECT_EQ(info.fused_response_bytes().counts(0), 1u);  // 1000 <= 1 KiB
}

}  // namespace
}  // namespace gradsync::metrics
