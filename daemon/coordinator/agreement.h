// SPDX-License-Identifier: Apache-2.0
// Checks that every rank's request for one collective agrees (dtype, shape or
// the allgather/alltoall rules, op, scale factors, root, group).
#pragma once

#include "daemon/coordinator/request.h"

namespace gradsync::coordinator {

// OK when the present requests of `response` agree; otherwise
// FAILED_PRECONDITION naming the job, the tensor, what differs and which
// ranks hold which value, e.g.
//   job 'j' tensor 'w.grad': ranks disagree on dtype: float32 on ranks [0, 2]; int32 on ranks [1]
Status checkAgreement(const std::string& job_id, const Response& response);

}  // namespace gradsync::coordinator
