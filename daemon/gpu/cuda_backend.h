// SPDX-License-Identifier: Apache-2.0
// GpuBackend and DeviceOps on the CUDA runtime (linked statically): importing
// clients' memory and events, and the streams, copies, kernels and
// stream-ordered allocations the GPU executor runs.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/gpu_backend.h"

namespace gradsync::gpu {

// "cudaErrorInvalidValue (1): invalid argument" for messages.
std::string cudaErrorText(cudaError_t err);

// Waits for `stream` to drain, polling, at most `limit`; DEADLINE_EXCEEDED
// past it (the caller then leaves mappings open rather than hang).
Status waitForStream(cudaStream_t stream, std::chrono::milliseconds limit, const std::string& what);

class CudaBackend : public GpuBackend, public DeviceOps {
 public:
  explicit CudaBackend(int device_count);
  ~CudaBackend() override;

  // GpuBackend: importing clients' memory and events.
  StatusOr<MappedMemory> openMemory(int device, const std::string& handle) override;
  StatusOr<MappedMemory> openChunks(int device, std::vector<UniqueFd> fds,
                                    const std::vector<uint64_t>& chunk_bytes) override;
  Status closeMemory(int device, void* address) override;
  StatusOr<void*> openEvent(int device, const std::string& handle) override;
  StatusOr<SharedEvent> createSharedEvent(int device) override;
  void destroyEvent(int device, void* event) override;
  StatusOr<void*> createEvent(int device) override;
  void closeWhenIdle(int device, void* address, void* last_use, const std::string& what) override;

  // DeviceOps. Streams are high-priority and non-blocking, one per job and
  // device (jobs sharing a GPU run side by side, and one stuck on a dead
  // client's event holds up only itself), tracked until released.
  Status select(int device) override;
  StatusOr<void*> newStream(int device) override;
  Status releaseStream(int device, void* stream) override;
  StatusOr<bool> eventDone(void* event) override;
  Status recordEvent(void* event, void* stream) override;
  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) override;
  Status reduce(const cuda::LocalReduceArgs& args, void* stream) override;
  Status waitStream(void* stream, const std::string& what) override;
  StatusOr<bool> streamIdle(void* stream) override;
  StatusOr<void*> allocate(int device, size_t bytes, void* stream) override;
  void release(int device, void* data, void* stream) override;
  StatusOr<void*> newTimedEvent(int device) override;
  StatusOr<float> elapsedMs(void* from, void* to) override;
  void destroyTimedEvent(int device, void* event) override;

 private:
  // Mappings waiting for their last use to finish, polled by reaper_.
  struct PendingClose {
    int device;
    void* address;
    void* last_use;
    std::string what;
    std::chrono::steady_clock::time_point since;
    bool warned = false;
  };
  void reapLoop();
  // Unmaps an IPC mapping or a range of cuMem chunks (the device selected).
  Status unmap(void* address);

  const int device_count_;
  Mutex mutex_;
  std::vector<std::vector<cudaStream_t>> streams_ GS_GUARDED_BY(mutex_);  // per device
  Mutex reap_mutex_;
  CondVar reap_cv_;
  std::vector<PendingClose> pending_ GS_GUARDED_BY(reap_mutex_);
  std::vector<bool> pools_configured_ GS_GUARDED_BY(mutex_);  // per device
  // The ranges of cuMem chunks mapped (openChunks), with their chunks' sizes.
  std::map<void*, std::vector<uint64_t>> chunked_ GS_GUARDED_BY(mutex_);
  bool stopping_ GS_GUARDED_BY(reap_mutex_) = false;
  std::thread reaper_;
};

}  // namespace gradsync::gpu
