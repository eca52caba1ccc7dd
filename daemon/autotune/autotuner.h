// SPDX-License-Identifier: Apache-2.0
// Online tuning of a job's fusion threshold and cycle time from measured
// throughput (Horovod's HOROVOD_AUTOTUNE, with a coordinate search in place
// of its Bayesian optimisation). Training repeats the same tensors every
// step, so a sample ends when the tensor name that began it has been seen
// `steps_per_sample` more times (if another name gets there first, at that
// one), and scores the bytes completed
// in it per second of wall time (compute between the steps included: what
// is scored is how fast the job goes). After `warmup_samples` that are
// thrown away, each setting is held for `samples_per_setting` samples and
// scored by their median: first every fusion threshold at the first cycle
// time, then every cycle time at the best threshold. The best setting
// measured stays. Pure state: the caller serialises calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gradsync::autotune {

using Clock = std::chrono::steady_clock;

struct Settings {
  uint64_t fusion_threshold_bytes = 64 << 20;  // 1: nothing fuses
  std::chrono::microseconds cycle_time{0};     // how long ready collectives wait for more
  bool operator==(const Settings& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time == o.cycle_time;
  }
};

struct Options {
  uint32_t warmup_samples = 3;
  uint32_t steps_per_sample = 10;
  uint32_t samples_per_setting = 5;
  // The candidates (the initial setting's values are added).
  std::vector<uint64_t> fusion_thresholds = {1, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20};
  std::vector<std::chrono::microseconds> cycle_times = {
      std::chrono::microseconds(0), std::chrono::microseconds(250), std::chrono::microseconds(1000),
      std::chrono::microseconds(2500), std::chrono::microseconds(5000)};
};

// A setting measured: the median of its samples, in bytes per second.
struct Trial {
  Settings settings;
  double bytes_per_second = 0;
};

enum class Phase { kWarmup, kFusionThreshold, kCycleTime, kDone, kGaveUp };
const char* phaseName(Phase phase);

class Autotuner {
 public:
  // A sample in which this many distinct names passed without any repeating
  // ends the tuning: the job's tensor names do not repeat by step.
  static constexpr size_t kMaxNamesPerSample = 65536;

  Autotuner(Settings initial, Options options);

  // A collective named `name` carrying `bytes` (one rank's input) completed
  // at `now`. True when current() changed.
  bool record(std::string_view name, uint64_t bytes, Clock::time_point now);

  const Settings& current() const { return current_; }
  Phase phase() const { return phase_; }
  // Samples scored so far (warm-up included) and the number a full run
  // takes.
  uint32_t samplesTaken() const { return samples_taken_; }
  uint32_t samplesPlanned() const { return samples_planned_; }
  // Every setting measured, in order; the first is the initial one.
  const std::vector<Trial>& trials() const { return trials_; }
  // The best setting measured so far.
  std::optional<Trial> best() const;

 private:
  void startSample(std::string_view name, Clock::time_point now);
  void endSample(std::string_view name, Clock::time_point now);
  void scoreSetting();
  // Moves to the next candidate of the current phase, or the next phase.
  void advance();

  Options options_;
  Settings current_;
  Phase phase_ = Phase::kWarmup;
  std::vector<Settings> queue_;  // the current phase's settings still to measure
  std::vector<Trial> trials_;
  std::vector<double> scores_;  // of the current setting
  uint32_t samples_taken_ = 0;
  uint32_t samples_planned_ = 0;
  // The current sample.
  std::optional<Clock::time_point> sample_start_;
  uint64_t sample_bytes_ = 0;
  std::unordered_map<std::string, uint32_t> seen_;
};

// "64 MiB", "none" for 1 byte: a threshold as people read it.
std::string describeThreshold(uint64_t bytes);

}  // namespace gradsync::autotune
