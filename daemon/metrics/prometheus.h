// SPDX-License-Identifier: Apache-2.0
// The daemon's metrics in Prometheus' text format, made from what the Admin
// service reports (GetStatus and ListJobs): the same facts gradsyncctl
// shows. Jobs that ended are not in ListJobs, so their series drop out.
#pragma once

#include <string>

#include "proto/gradsync/v1/admin.pb.h"

namespace gradsync::metrics {

std::string renderPrometheus(const v1::GetStatusResponse& status, const v1::ListJobsResponse& jobs);

}  // namespace gradsync::metrics
