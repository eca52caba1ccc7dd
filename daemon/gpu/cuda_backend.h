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
  Status synchronize(int device) override;

  // The daemon's stream on `device` (created on first use).
  StatusOr<cudaStream_t> stream(int device);
  // At least `bytes` of device memory on `device`, reused across calls (the
  // caller serialises its use on the device's stream).
  StatusOr<void*> scratch(int device, size_t bytes);
  // At least `bytes` of pinned host memory for staging transfers between
  // daemons, reused likewise (one buffer for the node).
  StatusOr<void*> pinnedHost(size_t bytes);

 private:
  struct Device {
    cudaStream_t stream = nullptr;
    void* scratch = nullptr;
    size_t scratch_bytes = 0;
  };
  Status select(int device);
  std::mutex mutex_;
  std::vector<Device> devices_;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
};

}  // namespace gradsync::gpu
