// SPDX-License-Identifier: Apache-2.0
// A list of memcpy's run in parallel shards by the reduce pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/executor/reduce_pool.h"

namespace gradsync::executor {

class CopyPlan {
 public:
  void add(uint8_t* dst, const uint8_t* src, size_t bytes);
  // Runs every copy, large ones split so both cores share the work.
  void run(ReducePool& pool) const;

 private:
  struct Copy {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };
  std::vector<Copy> copies_;
  size_t total_ = 0;
};

}  // namespace gradsync::executor
