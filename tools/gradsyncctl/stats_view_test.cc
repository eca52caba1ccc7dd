// SPDX-License-Identifier: Apache-2.0
#include "tools/gradsyncctl/stats_view.h"

#include "gtest/gtest.h"
#include "tools/gradsyncctl/format.h"

namespace gradsync::ctl {
namespace {

// Buckets (0, 1], (1, 2], (2, 4], (4, inf).
v1::Histogram histogram(std::vector<uint64_t> counts) {
  v1::Histogram h;
  for (double bound : {1.0, 2.0, 4.0}) h.add_upper_bounds(bound);
  uint64_t total = 0;
  for (uint64_t c : counts) {
    h.add_counts(c);
    total += c;
  }
  h.set_count(total);
  return h;
}

TEST(StatsView, QuantilesInterpolateInsideTheirBucket) {
  const v1::Histogram h = histogram({10, 10, 0, 0});
  EXPECT_DOUBLE_EQ(histogramQuantile(h, 0.5), 1.0);                        // the 10th of 20: top of the first bucket
  EXPECT_DOUBLE_EQ(histogramQuantile(h, 0.25), 0.5);                       // half way through the first
  EXPECT_DOUBLE_EQ(histogramQuantile(h, 0.75), 1.5);                       // half way through the second
  EXPECT_DOUBLE_EQ(histogramQuantile(histogram({0, 0, 0, 5}), 0.5), 4.0);  // unbounded: the last bound
  EXPECT_DOUBLE_EQ(histogramQuantile(histogram({0, 0, 0, 0}), 0.5), 0.0);
  EXPECT_DOUBLE_EQ(histogramQuantile(v1::Histogram(), 0.99), 0.0);
}

TEST(StatsView, DeltaIsPerBucketAndAResetGivesTheNewValues) {
  const v1::Histogram delta = histogramDelta(histogram({5, 7, 1, 0}), histogram({4, 2, 1, 0}));
  EXPECT_EQ(delta.counts(0), 1u);
  EXPECT_EQ(delta.counts(1), 5u);
  EXPECT_EQ(delta.counts(2), 0u);
  EXPECT_EQ(delta.count(), 6u);
  const v1::Histogram reset = histogramDelta(histogram({1, 0, 0, 0}), histogram({4, 2, 1, 0}));
  EXPECT_EQ(reset.count(), 1u);
  EXPECT_EQ(histogramDelta(histogram({1, 0, 0, 0}), v1::Histogram()).count(), 1u);
}

v1::JobInfo job(uint64_t ops, uint64_t bytes, std::vector<uint64_t> latency_counts) {
  v1::JobInfo j;
  j.set_job_id("train");
  j.set_size(4);
  j.set_local_size(2);
  j.set_operations_done(ops);
  j.set_bytes_done(bytes);
  j.set_healthy(true);
  v1::CollectiveStats* stats = j.add_collective_stats();
  stats->set_type(v1::ALLREDUCE);
  stats->set_dtype(v1::FLOAT32);
  stats->set_operations(ops);
  stats->set_bytes(bytes);
  v1::LatencyStats* latency = j.add_latency();
  latency->set_type(v1::ALLREDUCE);
  *latency->mutable_seconds() = histogram(latency_counts);
  return j;
}

TEST(StatsView, TopShowsRatesAndPercentilesOfTheInterval) {
  v1::GetStatusResponse status;
  status.set_version("0.1.0");
  status.set_hostname("node7");
  v1::ListJobsResponse before, now;
  *before.add_jobs() = job(100, 1 << 20, {100, 0, 0, 0});  // all at most 1 s before
  *now.add_jobs() = job(300, 3 << 20, {100, 0, 200, 0});   // the interval's 200: 2-4 s
  const std::string screen = formatTop(status, before, now, 2.0);
  EXPECT_NE(screen.find("gradsyncd 0.1.0 on node7"), std::string::npos) << screen;
  EXPECT_NE(screen.find("train"), std::string::npos) << screen;
  EXPECT_NE(screen.find("2/4"), std::string::npos) << screen;
  EXPECT_NE(screen.find("100.0"), std::string::npos) << "200 operations in 2 s\n" << screen;
  EXPECT_NE(screen.find("1.00 MiB"), std::string::npos) << "2 MiB in 2 s\n" << screen;
  EXPECT_NE(screen.find("3.00s"), std::string::npos) << "p50 of the interval, not of all time\n" << screen;
}

TEST(StatsView, StatsListsCollectivesPhasesAndErrors) {
  v1::ListJobsResponse jobs;
  v1::JobInfo* j = jobs.add_jobs();
  *j = job(10, 4096, {10, 0, 0, 0});
  j->set_errors(3);
  v1::ErrorCount* error = j->add_errors_by_cause();
  error->set_cause("ABORTED");
  error->set_count(3);
  v1::PhaseTime* phase = j->add_phases();
  phase->set_name("REDUCE");
  phase->set_seconds(0.25);
  const std::string text = formatStats(jobs);
  EXPECT_NE(text.find("allreduce"), std::string::npos) << text;
  EXPECT_NE(text.find("float32"), std::string::npos) << text;
  EXPECT_NE(text.find("4.00 KiB"), std::string::npos) << text;
  EXPECT_NE(text.find("REDUCE 0.250s"), std::string::npos) << text;
  EXPECT_NE(text.find("errors: 3 (ABORTED 3)"), std::string::npos) << text;
  EXPECT_EQ(formatStats(v1::ListJobsResponse()), "no jobs\n");
}

TEST(StatsView, TensorsNameTheMissingRanks) {
  v1::ListTensorsResponse tensors;
  v1::JobTensors* job = tensors.add_jobs();
  job->set_job_id("train");
  job->set_in_flight(3);
  v1::TensorInFlight* t = job->add_negotiating();
  t->set_name("grad.fc1");
  t->set_age_seconds(75);
  t->add_submitted_ranks(0);
  t->add_submitted_ranks(1);
  t->add_missing_ranks(2);
  const std::string text = formatTensors(tensors);
  EXPECT_NE(text.find("job train: 3 in flight, 1 waiting for ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("grad.fc1"), std::string::npos) << text;
  EXPECT_NE(text.find("1m 15s"), std::string::npos) << text;
  EXPECT_NE(text.find("submitted [0,1]  missing [2]"), std::string::npos) << text;
  EXPECT_EQ(text.find("output"), std::string::npos) << text;
}

TEST(StatsView, TensorsNameTheRanksAnOutputRequestWaitsFor) {
  v1::ListTensorsResponse tensors;
  v1::JobTensors* job = tensors.add_jobs();
  job->set_job_id("train");
  job->set_in_flight(1);
  v1::TensorAwaitingOutput* t = job->add_awaiting_output();
  t->set_name("ag424");
  t->set_age_seconds(12);
  t->add_granted_ranks(2);
  t->add_waiting_ranks(3);
  const std::string text = formatTensors(tensors);
  EXPECT_NE(text.find("job train: 1 in flight, 0 waiting for ranks, 1 waiting for output grants"), std::string::npos)
      << text;
  EXPECT_NE(text.find("ag424"), std::string::npos) << text;
  EXPECT_NE(text.find("output granted [2]  output requested from [3]"), std::string::npos) << text;
}

}  // namespace
}  // namespace gradsync::ctl
