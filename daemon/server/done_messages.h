// SPDX-License-Identifier: Apache-2.0
// The messages a job sends its ranks about their collectives, built from
// what happened alone (no job state): the Done of a request, of each
// request of a response that ran, and an autotune sample.
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"
#include "daemon/autotune/job_tuning.h"
#include "daemon/coordinator/request.h"
#include "daemon/executor/rank_access.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::server {

// The Done answering `request` of job `job_id` with `status` (a failure's
// detail names the job and tensor). `membership_changed`: the failure is
// an elastic membership change's doing, retriable.
v1::DaemonMessage doneMessage(const std::string& job_id, const coordinator::Request& request, const Status& status,
                              bool membership_changed = false);

// The Done of request `i` of `response` that ran with `result`: a failure
// names the tensor and the response's ranks (`retriable`: the membership
// changed meanwhile); an output shape and received splits where the
// executor gave them; `epoch_changed`: a commit that admitted joiners.
v1::DaemonMessage responseDone(const std::string& job_id, const coordinator::Response& response,
                               const executor::ResponseResult& result, size_t i, bool retriable, bool epoch_changed);

// What autotune measured or decided, for the ranks that asked
// (RegisterRequest.autotune_log).
v1::DaemonMessage tuningSample(const autotune::TuningEvent& event);

}  // namespace gradsync::server
