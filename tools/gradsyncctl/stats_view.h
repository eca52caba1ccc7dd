// SPDX-License-Identifier: Apache-2.0
// The metrics in a terminal: `gradsyncctl stats` (totals since each job
// started) and `gradsyncctl top` (rates and latency percentiles between two
// snapshots). Pure functions of Admin responses, unit-tested.
#pragma once

#include <string>

#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::ctl {

// The value below which a fraction `q` (0..1) of the histogram's
// observations lie, interpolated linearly inside its bucket as Prometheus'
// histogram_quantile does; the last finite bound when it falls in the
// unbounded bucket; 0 when empty.
double histogramQuantile(const v1::Histogram& histogram, double q);
// `now` minus `before` bucket by bucket (same buckets; a reset, where a
// count went down, gives `now`).
v1::Histogram histogramDelta(const v1::Histogram& now, const v1::Histogram& before);

// Per job: collectives by type and dtype (operations, bytes, latency p50,
// p90, p99), errors by cause, queued and per-phase seconds.
std::string formatStats(const v1::ListJobsResponse& jobs);

// One `top` screen: the daemon's line, then per job the operations and
// bytes per second and latency percentiles over the `seconds` between
// `before` and `now`, tensors in flight, stalls and errors in the interval.
// A job missing from `before` counts from zero.
std::string formatTop(const v1::GetStatusResponse& status, const v1::ListJobsResponse& before,
                      const v1::ListJobsResponse& now, double seconds);

}  // namespace gradsync::ctl
