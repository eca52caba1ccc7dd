// SPDX-License-Identifier: Apache-2.0
// The fusion threshold and cycle time one job runs with on this daemon,
// autotuned or fixed. The daemon that decides them (a one-daemon job's, or
// the leader across daemons) feeds each completed collective to the tuner
// and logs its choices; a follower runs each batch with the threshold the
// leader sent with it, since every daemon must fuse alike. Not thread-safe:
// the job's mutex guards it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/autotune/autotuner.h"
#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::autotune {

// What autotune did with one completed collective, for the ranks that
// write it down (GRADSYNC_AUTOTUNE_LOG): measured a setting, or ended.
struct TuningEvent {
  Settings settings;
  double bytes_per_second = 0;  // 0 when it gave up
  std::string phase;            // "fusion threshold", "cycle time", "chose", "gave up"
};

class JobTuning {
 public:
  // `options`: autotuned with them, starting at `initial`; nullopt: fixed.
  JobTuning(std::string job_id, Settings initial, std::optional<Options> options);

  // What the next batch this daemon decides runs with.
  const Settings& current() const { return tuner_ ? tuner_->current() : fixed_; }
  bool autotuned() const { return tuner_.has_value(); }
  // The deciding daemon: a collective named `name` with `bytes` (one
  // rank's input) completed at `now`. Returns what that made autotune
  // measure or decide (mostly nothing).
  std::vector<TuningEvent> completed(std::string_view name, uint64_t bytes, Clock::time_point now);
  // A follower ran the leader's batch with `fusion_threshold_bytes` (0:
  // the leader did not say).
  void followLeader(uint64_t fusion_threshold_bytes);
  // `decides`: this daemon decides (false: a follower's view).
  void fill(bool decides, v1::JobTuning* info) const;

 private:
  void logTrial(const Trial& trial) const;

  std::string job_id_;
  Settings fixed_;  // not autotuned
  std::optional<Autotuner> tuner_;
  uint64_t leader_threshold_ = 0;  // follower: the last the leader sent
};

// "16 MiB, 0.25 ms": a setting as the logs and gradsyncctl show it.
std::string describe(const Settings& settings);

}  // namespace gradsync::autotune
