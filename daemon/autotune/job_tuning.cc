// SPDX-License-Identifier: Apache-2.0
#include "daemon/autotune/job_tuning.h"

#include <fmt/format.h>

#include "daemon/common/logging.h"

namespace gradsync::autotune {
namespace {

double milliseconds(std::chrono::microseconds d) { return static_cast<double>(d.count()) / 1000.0; }

std::string rate(double bytes_per_second) { return fmt::format("{:.1f} MB/s", bytes_per_second / 1e6); }

// What the search varied while a trial was measured.
std::string searchName(Phase phase) {
  switch (phase) {
    case Phase::kFusionThreshold:
      return "fusion threshold";
    case Phase::kCycleTime:
      return "cycle time";
    default:
      return phaseName(phase);
  }
}

}  // namespace

std::string describe(const Settings& settings) {
  return fmt::format("fusion threshold {}, cycle time {:g} ms", describeThreshold(settings.fusion_threshold_bytes),
                     milliseconds(settings.cycle_time));
}

JobTuning::JobTuning(std::string job_id, Settings initial, std::optional<Options> options)
    : job_id_(std::move(job_id)), fixed_(initial) {
  if (options) tuner_.emplace(initial, std::move(*options));
}

std::vector<TuningEvent> JobTuning::completed(std::string_view name, uint64_t bytes, Clock::time_point now) {
  std::vector<TuningEvent> events;
  if (!tuner_) return events;
  const size_t trials = tuner_->trials().size();
  const Phase phase = tuner_->phase();
  if (!tuner_->record(name, bytes, now) && tuner_->trials().size() == trials && tuner_->phase() == phase) return events;
  if (tuner_->trials().size() > trials) {
    const Trial& trial = tuner_->trials().back();
    logTrial(trial);
    events.push_back({trial.settings, trial.bytes_per_second, searchName(phase)});
  }
  switch (tuner_->phase()) {
    case Phase::kDone: {
      events.push_back({tuner_->current(), tuner_->best()->bytes_per_second, "chose"});
      const Trial& initial = tuner_->trials().front();
      GS_LOG(control, info, "job '{}': autotune chose {} ({}; the initial {}: {}) after {} samples", job_id_,
             describe(tuner_->current()), rate(tuner_->best()->bytes_per_second), describe(initial.settings),
             rate(initial.bytes_per_second), tuner_->samplesTaken());
      break;
    }
    case Phase::kGaveUp:
      GS_LOG(control, warn,
             "job '{}': autotune gave up: {} tensors completed in one sample without any name repeating (the job's "
             "tensors need the same names every step); it keeps {}",
             job_id_, Autotuner::kMaxNamesPerSample, describe(tuner_->current()));
      events.push_back({tuner_->current(), 0, "gave up"});
      break;
    default:
      GS_LOG(control, debug, "job '{}': autotune {}: tries {} (sample {} of {})", job_id_, phaseName(tuner_->phase()),
             describe(tuner_->current()), tuner_->samplesTaken(), tuner_->samplesPlanned());
  }
  return events;
}

void JobTuning::logTrial(const Trial& trial) const {
  GS_LOG(control, info, "job '{}': autotune measured {}: {}", job_id_, describe(trial.settings),
         rate(trial.bytes_per_second));
}

void JobTuning::followLeader(uint64_t fusion_threshold_bytes) {
  if (fusion_threshold_bytes != 0) leader_threshold_ = fusion_threshold_bytes;
}

void JobTuning::fill(bool decides, v1::JobTuning* info) const {
  info->set_autotune(autotuned());
  if (!decides) {
    info->set_fusion_threshold_bytes(leader_threshold_ != 0 ? leader_threshold_ : fixed_.fusion_threshold_bytes);
    if (autotuned()) info->set_phase("the leader tunes");
    return;
  }
  info->set_fusion_threshold_bytes(current().fusion_threshold_bytes);
  info->set_cycle_time_ms(milliseconds(current().cycle_time));
  if (!tuner_) return;
  info->set_phase(phaseName(tuner_->phase()));
  info->set_samples(tuner_->samplesTaken());
  info->set_samples_planned(tuner_->samplesPlanned());
  for (const Trial& trial : tuner_->trials()) {
    auto* t = info->add_trials();
    t->set_fusion_threshold_bytes(trial.settings.fusion_threshold_bytes);
    t->set_cycle_time_ms(milliseconds(trial.settings.cycle_time));
    t->set_bytes_per_second(trial.bytes_per_second);
  }
}

}  // namespace gradsync::autotune
