// SPDX-License-Identifier: Apache-2.0
#include "daemon/metrics/histogram.h"

#include <algorithm>

namespace gradsync::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  ++count_;
  sum_ += value;
}

void Histogram::fill(v1::Histogram* out) const {
  out->Clear();
  for (double bound : bounds_) out->add_upper_bounds(bound);
  for (uint64_t c : counts_) out->add_counts(c);
  out->set_count(count_);
  out->set_sum(sum_);
}

Histogram Histogram::latencySeconds() {
  return Histogram({10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
                    25e-3, 50e-3, 0.1,   0.25,   0.5,    1,      2.5,  5,      10,   30});
}

Histogram Histogram::sizeBytes() {
  std::vector<double> bounds;
  for (double b = 1024; b <= 256.0 * 1024 * 1024; b *= 4) bounds.push_back(b);
  return Histogram(std::move(bounds));
}

}  // namespace gradsync::metrics
