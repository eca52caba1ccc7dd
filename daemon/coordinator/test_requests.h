// SPDX-License-Identifier: Apache-2.0
// Requests for tests: a rank's allreduce of a small float tensor.
#pragma once

#include <string>
#include <vector>

#include "daemon/coordinator/request.h"

namespace gradsync::coordinator::testing {

// Rank `rank`'s SUM allreduce named `name` (handle 100 + rank, 16 bytes).
inline Request allreduce(int rank, const std::string& name, DataType dtype = v1::FLOAT32,
                         std::vector<int64_t> shape = {4}) {
  Request r;
  r.rank = rank;
  r.handle = 100 + rank;
  r.name = name;
  r.type = v1::ALLREDUCE;
  r.dtype = dtype;
  r.shape = std::move(shape);
  r.op = v1::SUM;
  r.length = 16;
  return r;
}

}  // namespace gradsync::coordinator::testing
