// SPDX-License-Identifier: Apache-2.0
// GpuBackend on the CUDA runtime (linked statically), plus what the GPU
// executor needs per device: one high-priority non-blocking stream, and a
// scratch buffer allocated once and only grown.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "daemon/gpu/gpu_backend.h"

namespace gradsync::gpu {

// "cudaErrorInvalidValue (1): invalid argument" for messages.
std::string cudaErrorText(cudaError_t err);

// How long the daemon waits for its own stream before giving up: work that
// waits on an event of a client that died may never finish, and no daemon
// thread may hang on it.
constexpr std::chrono::seconds kStreamWaitLimit{10};

// Waits for `stream` to drain, polling, at most `limit`; DEADLINE_EXCEEDED
// past it (the caller then leaves mappings open rather than hang).
Status waitForStream(cudaStream_t stream, std::chrono::milliseconds limit, const std::string& what);

class CudaBackend : public GpuBackend {
 public:
  explicit CudaBackend(int device_count);
  ~CudaBackend() override;

  StatusOr<void*> openMemory(int device, const std::string& handle) override;
  Status closeMemory(int device, void* address) override;
  StatusOr<void*> openEvent(int device, const std::string& handle) override;
  StatusOr<SharedEvent> createSharedEvent(int device) override;
  void destroyEvent(int device, void* event) override;
  // Waits (bounded) for every stream the daemon has on `device`.
  Status synchronize(int device) override;

  // A new high-priority non-blocking stream on `device` (one per job and
  // device: jobs sharing a GPU run side by side, and one stuck on a dead
  // client's event holds up only itself). Tracked until released.
  StatusOr<cudaStream_t> newStream(int device);
  // Waits (bounded) for the stream, then destroys it; a stream that does not
  // drain is left alone (logged by the caller).
  Status releaseStream(int device, cudaStream_t stream);
  // Makes `device` current on the calling thread.
  Status select(int device);

 private:
  std::mutex mutex_;
  std::vector<std::vector<cudaStream_t>> streams_;  // per device
};

// Device memory (cudaMalloc) or pinned host memory (cudaMallocHost) that
// only grows: allocated once, reused for every batch of one job.
class GrowingBuffer {
 public:
  GrowingBuffer(bool pinned_host, int device) : pinned_host_(pinned_host), device_(device) {}
  ~GrowingBuffer();
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  // At least `bytes`. Growing frees the old buffer once `users` (a stream
  // that may still read it; null: none) drained, within the bounded wait.
  StatusOr<uint8_t*> reserve(size_t bytes, cudaStream_t users);

 private:
  const bool pinned_host_;
  const int device_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace gradsync::gpu
