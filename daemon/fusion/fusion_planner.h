// SPDX-License-Identifier: Apache-2.0
// Groups ready collectives into fused responses (Horovod's FuseResponses):
// a pure function, so every node given the same ordered input plans the same.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/coordinator/request.h"

namespace gradsync::fusion {

using coordinator::Response;

// A batch executed as one pass; `responses` keep their relative order.
struct FusedResponse {
  std::vector<Response> responses;
  uint64_t bytes = 0;  // input bytes of one rank
};

// Whether two responses may share one fused pass: both successful allreduces
// with the same dtype, device (CPU or CUDA), op, scale factors, process set and joined ranks.
bool fusable(const Response& a, const Response& b);

// Plans `ready` (in execution order) into fused responses. A bucket starts at
// the first unplanned response and takes every later fusable one while the
// bucket stays within `threshold_bytes`; a single response larger than the
// threshold forms a bucket of its own. Failed and non-allreduce responses are
// never fused.
std::vector<FusedResponse> planFusion(std::vector<Response> ready, uint64_t threshold_bytes);

}  // namespace gradsync::fusion
