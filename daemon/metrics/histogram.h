// SPDX-License-Identifier: Apache-2.0
// A histogram of fixed buckets, as Prometheus exposes one: counts per bucket
// (the last one unbounded), their sum and count. Not thread-safe: its owner
// locks.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::metrics {

class Histogram {
 public:
  // `upper_bounds`: increasing; a value lands in the first bucket whose
  // bound it does not exceed, else in the unbounded one after them.
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  void fill(v1::Histogram* out) const;

  // Operation latencies, 10 us to 30 s.
  static Histogram latencySeconds();
  // Fused response sizes, 1 KiB to 256 MiB.
  static Histogram sizeBytes();

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // bounds_.size() + 1, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace gradsync::metrics
