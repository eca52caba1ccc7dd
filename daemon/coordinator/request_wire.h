// SPDX-License-Identifier: Apache-2.0
// Field-by-field conversions between a rank's wire request (control.proto
// Enqueue) and the coordinator's Request: no checks (enqueue_validation
// checks a rank's own; the peer protocol carries checked ones); a zero
// scale factor reads as 1.
#pragma once

#include "daemon/coordinator/request.h"
#include "proto/gradsync/v1/control.pb.h"

namespace gradsync::coordinator {

v1::Enqueue enqueueOf(const Request& request);
Request requestOf(int rank, const v1::Enqueue& enqueue);

}  // namespace gradsync::coordinator
