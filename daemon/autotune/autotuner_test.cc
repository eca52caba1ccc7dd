// SPDX-License-Identifier: Apache-2.0
#include "daemon/autotune/autotuner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

namespace gradsync::autotune {
namespace {

using std::chrono::microseconds;
constexpr uint64_t kMiB = 1 << 20;

// A training job of `tensors` gradients of 1 MiB a step, whose step takes
// `step_time(settings)`: the tuner sees each gradient complete in turn.
struct SimulatedJob {
  SimulatedJob(int tensors, std::function<double(const Settings&)> step_seconds)
      : tensors(tensors), step_seconds(std::move(step_seconds)) {}
  int tensors;
  std::function<double(const Settings&)> step_seconds;
  Clock::time_point now{};
  std::vector<Settings> used;  // the setting of each step

  // Runs steps until the tuner is done (or `max_steps`); returns the steps.
  int run(Autotuner& tuner, int max_steps = 100000) {
    int steps = 0;
    for (; steps < max_steps && tuner.phase() != Phase::kDone && tuner.phase() != Phase::kGaveUp; ++steps) {
      const Settings settings = tuner.current();
      used.push_back(settings);
      const auto step =
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(step_seconds(settings)));
      for (int t = 0; t < tensors; ++t) {
        now += step / tensors;
        tuner.record("grad." + std::to_string(t), kMiB, now);
      }
    }
    return steps;
  }
};

// Fastest at 16 MiB and 250 us; every other candidate at least 15 % slower.
double valley(const Settings& s) {
  const double threshold_penalty =
      std::abs(std::log2(std::max<double>(1, static_cast<double>(s.fusion_threshold_bytes)) / (16.0 * kMiB))) * 0.1;
  const double cycle_penalty = std::abs(static_cast<double>(s.cycle_time.count()) - 250.0) / 1000.0 * 0.2;
  return 0.1 * (1 + threshold_penalty + cycle_penalty);
}

TEST(AutotunerTest, FindsTheFastestThresholdThenTheFastestCycleTime) {
  Options options;
  Autotuner tuner({64 * kMiB, microseconds(1000)}, options);
  SimulatedJob job(20, valley);
  job.run(tuner);
  ASSERT_EQ(tuner.phase(), Phase::kDone);
  EXPECT_EQ(tuner.current().fusion_threshold_bytes, 16 * kMiB);
  EXPECT_EQ(tuner.current().cycle_time, microseconds(250));
  // 6 thresholds at 1 ms, then the other 4 cycle times at 16 MiB.
  ASSERT_EQ(tuner.trials().size(), 10u);
  EXPECT_EQ(tuner.trials().front().settings, (Settings{64 * kMiB, microseconds(1000)}));  // the initial one first
  EXPECT_EQ(tuner.samplesTaken(), tuner.samplesPlanned());
  EXPECT_EQ(tuner.samplesPlanned(), 3u + 5u * 10u);
  // Each score is the bytes of a step per step time.
  EXPECT_NEAR(tuner.best()->bytes_per_second, 20.0 * kMiB / valley(tuner.current()),
              0.02 * 20 * kMiB / valley(tuner.current()));
  // Once done it stays.
  const auto steps_before = job.used.size();
  for (int i = 0; i < 100; ++i) tuner.record("grad.0", kMiB, job.now += std::chrono::milliseconds(1));
  EXPECT_EQ(tuner.current(), (Settings{16 * kMiB, microseconds(250)}));
  EXPECT_EQ(job.used.size(), steps_before);
}

TEST(AutotunerTest, ASampleIsStepsPerSampleRepetitionsOfAName) {
  Options options;
  options.warmup_samples = 1;
  options.steps_per_sample = 4;
  options.samples_per_setting = 1;
  Autotuner tuner({64 * kMiB, microseconds(0)}, options);
  SimulatedJob job(3, [](const Settings&) { return 0.01; });
  // The first completion (grad.0 of step 1) starts the first sample, the
  // warm-up; it ends at the 4th grad.0 after it (step 5), and the next
  // sample 4 steps later.
  job.run(tuner, 4);
  EXPECT_EQ(tuner.samplesTaken(), 0u);
  job.run(tuner, 1);
  EXPECT_EQ(tuner.samplesTaken(), 1u);
  EXPECT_EQ(tuner.phase(), Phase::kFusionThreshold);
  EXPECT_TRUE(tuner.trials().empty());
  job.run(tuner, 4);
  EXPECT_EQ(tuner.samplesTaken(), 2u);
  ASSERT_EQ(tuner.trials().size(), 1u);
  // 4 steps of 3 MiB in 40 ms.
  EXPECT_NEAR(tuner.trials()[0].bytes_per_second, 12.0 * kMiB / 0.04, 1e-6 * 12.0 * kMiB / 0.04);
}

TEST(AutotunerTest, WarmUpSamplesAreNotScored) {
  Options options;
  options.warmup_samples = 2;
  options.steps_per_sample = 5;
  int steps = 0;
  // The first 11 steps (the warm-up) are slow whatever the setting: the
  // initial setting would be measured as the worst if they counted.
  SimulatedJob job(10, [&](const Settings& s) { return ++steps <= 11 ? 1.0 : valley(s); });
  Autotuner tuner({64 * kMiB, microseconds(1000)}, options);
  job.run(tuner);
  ASSERT_EQ(tuner.phase(), Phase::kDone);
  EXPECT_NEAR(tuner.trials().front().bytes_per_second, 10.0 * kMiB / valley({64 * kMiB, microseconds(1000)}),
              0.02 * 10.0 * kMiB / valley({64 * kMiB, microseconds(1000)}));
}

TEST(AutotunerTest, NoisyStepsStillFindTheFastestSetting) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.85, 1.15);
  std::uniform_real_distribution<double> hiccup(0, 1);
  // ±15 % on every step and one step in 50 three times as slow.
  SimulatedJob job(20, [&](const Settings& s) { return valley(s) * noise(rng) * (hiccup(rng) < 0.02 ? 3 : 1); });
  Options options;
  options.samples_per_setting = 7;
  Autotuner tuner({64 * kMiB, microseconds(1000)}, options);
  job.run(tuner);
  ASSERT_EQ(tuner.phase(), Phase::kDone);
  EXPECT_EQ(tuner.current(), (Settings{16 * kMiB, microseconds(250)}));
}

TEST(AutotunerTest, AnInitialSettingOutsideTheCandidatesIsMeasuredFirst) {
  Options options;
  options.warmup_samples = 0;
  options.steps_per_sample = 2;
  options.samples_per_setting = 1;
  options.fusion_thresholds = {kMiB, 8 * kMiB};
  options.cycle_times = {microseconds(0), microseconds(500)};
  Autotuner tuner({3 * kMiB, microseconds(100)}, options);
  EXPECT_EQ(tuner.phase(), Phase::kFusionThreshold);
  EXPECT_EQ(tuner.samplesPlanned(), 3u + 3u - 1u);
  // The initial setting is the fastest: it stays.
  SimulatedJob job(4, [](const Settings& s) { return s == Settings{3 * kMiB, microseconds(100)} ? 0.01 : 0.02; });
  job.run(tuner);
  ASSERT_EQ(tuner.phase(), Phase::kDone);
  EXPECT_EQ(tuner.current(), (Settings{3 * kMiB, microseconds(100)}));
  ASSERT_EQ(tuner.trials().size(), 5u);
  EXPECT_EQ(tuner.trials()[1].settings, (Settings{kMiB, microseconds(100)}));
  EXPECT_EQ(tuner.trials()[3].settings, (Settings{3 * kMiB, microseconds(0)}));
}

TEST(AutotunerTest, GivesUpWhenNoNameRepeats) {
  Options options;
  Autotuner tuner({64 * kMiB, microseconds(1000)}, options);
  Clock::time_point now{};
  bool changed = false;
  for (size_t i = 0; i <= Autotuner::kMaxNamesPerSample + 1 && tuner.phase() != Phase::kGaveUp; ++i) {
    changed |= tuner.record("allreduce.noname." + std::to_string(i), 4, now += microseconds(10));
  }
  EXPECT_EQ(tuner.phase(), Phase::kGaveUp);
  EXPECT_FALSE(changed);
  EXPECT_EQ(tuner.current(), (Settings{64 * kMiB, microseconds(1000)}));
  EXPECT_FALSE(tuner.record("x", 4, now));
}

TEST(AutotunerTest, RecordSaysWhenTheSettingChanged) {
  Options options;
  options.warmup_samples = 0;
  options.steps_per_sample = 1;
  options.samples_per_setting = 1;
  options.fusion_thresholds = {kMiB};
  options.cycle_times = {microseconds(0)};
  Autotuner tuner({2 * kMiB, microseconds(0)}, options);
  Clock::time_point now{};
  EXPECT_FALSE(tuner.record("a", 1, now));                              // starts the sample
  EXPECT_TRUE(tuner.record("a", 100, now += std::chrono::seconds(1)));  // 2 MiB scored: on to 1 MiB
  EXPECT_EQ(tuner.current().fusion_threshold_bytes, kMiB);
  EXPECT_TRUE(tuner.record("a", 10, now += std::chrono::seconds(1)));  // 1 MiB scored lower: back to 2
  EXPECT_EQ(tuner.phase(), Phase::kDone);
  EXPECT_EQ(tuner.current().fusion_threshold_bytes, 2 * kMiB);
}

TEST(AutotunerTest, DescribesThresholds) {
  EXPECT_EQ(describeThreshold(1), "none");
  EXPECT_EQ(describeThreshold(64 * kMiB), "64 MiB");
  EXPECT_EQ(describeThreshold(512 << 10), "512 KiB");
  EXPECT_EQ(describeThreshold(1000), "1000 B");
}

}  // namespace
}  // namespace gradsync::autotune
