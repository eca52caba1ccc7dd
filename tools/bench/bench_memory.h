// SPDX-License-Identifier: Apache-2.0
// Where gradsync_bench's tensors live: the shared arena (zero copy), the
// rank's heap (the client copies in and out), or CUDA device memory (the
// daemon reaches it through CUDA IPC).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradsync/gradsync.hpp"

namespace gradsync::bench {

class BenchMemory {
 public:
  virtual ~BenchMemory() = default;
  // Null when it cannot be had (the error is printed).
  virtual float* allocate(uint64_t bytes) = 0;
  virtual void fill(float* data, size_t count, float value) = 0;
  virtual std::vector<float> read(const float* data, size_t count) = 0;
  // Blocks until the device finished what was queued (no-op on the CPU).
  virtual void finish() {}
  // GRADSYNC_DEVICE_CPU or GRADSYNC_DEVICE_CUDA, for gradsync_op_t.device.
  virtual int device() const { return GRADSYNC_DEVICE_CPU; }
  virtual const char* describe() const = 0;
};

// kind: "arena", "heap" or "cuda" (null and a message for an unknown kind
// or a machine without CUDA).
std::unique_ptr<BenchMemory> makeBenchMemory(const std::string& kind, Client& client, int local_rank);

}  // namespace gradsync::bench
