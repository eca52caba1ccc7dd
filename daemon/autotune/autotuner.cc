// SPDX-License-Identifier: Apache-2.0
#include "daemon/autotune/autotuner.h"

#include <algorithm>

namespace gradsync::autotune {
namespace {

template <typename T>
std::vector<T> withInitialFirst(std::vector<T> candidates, T initial) {
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  candidates.erase(std::remove(candidates.begin(), candidates.end(), initial), candidates.end());
  candidates.insert(candidates.begin(), initial);
  return candidates;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kWarmup:
      return "warming up";
    case Phase::kFusionThreshold:
      return "tuning the fusion threshold";
    case Phase::kCycleTime:
      return "tuning the cycle time";
    case Phase::kDone:
      return "done";
    case Phase::kGaveUp:
      return "gave up: no tensor name repeated";
  }
  return "?";
}

std::string describeThreshold(uint64_t bytes) {
  if (bytes <= 1) return "none";
  if (bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

Autotuner::Autotuner(Settings initial, Options options) : options_(std::move(options)), current_(initial) {
  options_.steps_per_sample = std::max<uint32_t>(1, options_.steps_per_sample);
  options_.samples_per_setting = std::max<uint32_t>(1, options_.samples_per_setting);
  for (uint64_t threshold : withInitialFirst(options_.fusion_thresholds, initial.fusion_threshold_bytes)) {
    queue_.push_back({threshold, initial.cycle_time});
  }
  // The best threshold at the initial cycle time is measured once.
  const size_t settings = queue_.size() + withInitialFirst(options_.cycle_times, initial.cycle_time).size() - 1;
  samples_planned_ = options_.warmup_samples + options_.samples_per_setting * static_cast<uint32_t>(settings);
  if (options_.warmup_samples == 0) phase_ = Phase::kFusionThreshold;
}

std::optional<Trial> Autotuner::best() const {
  if (trials_.empty()) return std::nullopt;
  return *std::max_element(trials_.begin(), trials_.end(),
                           [](const Trial& a, const Trial& b) { return a.bytes_per_second < b.bytes_per_second; });
}

bool Autotuner::record(std::string_view name, uint64_t bytes, Clock::time_point now) {
  if (phase_ == Phase::kDone || phase_ == Phase::kGaveUp) return false;
  if (!sample_start_) {  // the first completion starts the first sample
    startSample(name, now);
    return false;
  }
  const Settings before = current_;
  sample_bytes_ += bytes;
  auto [it, inserted] = seen_.try_emplace(std::string(name), 0);
  if (inserted && seen_.size() > kMaxNamesPerSample) {
    phase_ = Phase::kGaveUp;
    if (auto b = best()) current_ = b->settings;
    seen_.clear();
    return !(before == current_);
  }
  // The name that started the sample, seen again `steps_per_sample` times
  // later: that many steps, their bytes and their time.
  if (++it->second > options_.steps_per_sample) endSample(name, now);
  return !(before == current_);
}

void Autotuner::startSample(std::string_view name, Clock::time_point now) {
  sample_start_ = now;
  sample_bytes_ = 0;
  seen_.clear();
  seen_.emplace(std::string(name), 1);
}

void Autotuner::endSample(std::string_view name, Clock::time_point now) {
  const double seconds = std::max(1e-9, std::chrono::duration<double>(now - *sample_start_).count());
  const double score = static_cast<double>(sample_bytes_) / seconds;
  ++samples_taken_;
  startSample(name, now);
  if (phase_ == Phase::kWarmup) {
    if (samples_taken_ >= options_.warmup_samples) phase_ = Phase::kFusionThreshold;
    return;
  }
  scores_.push_back(score);
  if (scores_.size() < options_.samples_per_setting) return;
  trials_.push_back({current_, median(std::move(scores_))});
  scores_.clear();
  advance();
}

void Autotuner::advance() {
  queue_.erase(queue_.begin());
  if (queue_.empty() && phase_ == Phase::kFusionThreshold) {
    phase_ = Phase::kCycleTime;
    const uint64_t threshold = best()->settings.fusion_threshold_bytes;
    for (auto cycle : withInitialFirst(options_.cycle_times, trials_.front().settings.cycle_time)) {
      const Settings candidate{threshold, cycle};
      const bool measured =
          std::any_of(trials_.begin(), trials_.end(), [&](const Trial& t) { return t.settings == candidate; });
      if (!measured) queue_.push_back(candidate);
    }
  }
  if (queue_.empty()) {
    phase_ = Phase::kDone;
    current_ = best()->settings;
    return;
  }
  current_ = queue_.front();
}

}  // namespace gradsync::autotune
