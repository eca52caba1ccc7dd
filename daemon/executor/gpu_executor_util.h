// SPDX-License-Identifier: Apache-2.0
// Helpers of the GPU executor's files.
#pragma once

#include <string>

#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "daemon/coordinator/request.h"
#include "daemon/executor/rank_access.h"

namespace gradsync::executor {

// `status` with `what` in front of its message.
inline Status context(Status status, const std::string& what) {
  if (status.isOk()) return status;
  return Status(status.code(), what + ": " + status.message());
}

// The CPU kernels' rules on dtype, op and scale factors (the kernels assume
// them; enqueue validation checked most already).
inline Status checkReduction(const std::string& name, const coordinator::Request& first) {
  if (!reduceOpAllowed(first.dtype, first.op)) {
    return invalidArgument("tensor '" + name + "': " + reduceOpName(first.op) + " is not allowed on " +
                           dataTypeName(first.dtype));
  }
  if (first.dtype == v1::BOOL && (first.prescale != 1.0 || first.postscale != 1.0)) {
    return invalidArgument("tensor '" + name + "': bool tensors take no scale factors");
  }
  return okStatus();
}

// Allgather or alltoall: what each request's rank receives (allgather:
// every row; alltoall: its blocks), with the output shapes in `result`.
std::vector<uint64_t> gatheredBytes(const Response& r, ResponseResult* result);

}  // namespace gradsync::executor
