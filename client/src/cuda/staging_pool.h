// SPDX-License-Identifier: Apache-2.0
// Exportable stand-ins for tensors whose memory no other process can map
// (a stream-ordered pool: cudaMallocAsync, PyTorch's
// backend:cudaMallocAsync). Each is a device buffer of this process
// (cuMemAlloc, exported by CUDA IPC handle like any cudaMalloc memory), lent
// to one operation at a time and reused in stream order: a stream that
// borrows a buffer first waits for the event recorded after the buffer's
// last copy, so the host never blocks. Not thread-safe (CudaSession's lock
// guards it).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "client/src/cuda/cuda_driver.h"

namespace gradsync::client {

class StagingPool {
 public:
  // Buffers are at least this large (and multiples of it): PyTorch's
  // allocator rounds large blocks alike.
  static constexpr uint64_t kGranule = uint64_t{2} << 20;

  // At least `bytes` of device memory for an operation on `stream`, which
  // now waits for the buffer's earlier copies.
  StatusOr<uint64_t> take(CudaDriver& driver, void* context, uint64_t bytes, void* stream);
  // The buffer at `address` is free again once the work queued on `stream`
  // so far is done.
  Status give(CudaDriver& driver, void* context, uint64_t address, void* stream);
  // The buffers no operation holds; free() them after the daemon forgot
  // their exports.
  std::vector<uint64_t> idle() const;
  // Frees an idle buffer (cuMemFree waits for the work queued on it).
  void free(CudaDriver& driver, void* context, uint64_t address);
  void freeAll(CudaDriver& driver, void* context);
  size_t size() const { return buffers_.size(); }

 private:
  struct Buffer {
    uint64_t address = 0;
    uint64_t bytes = 0;
    bool lent = false;
    void* released = nullptr;  // recorded after its last copy (null: never lent)
  };
  std::vector<Buffer> buffers_;
};

}  // namespace gradsync::client
