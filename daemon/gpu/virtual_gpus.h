// SPDX-License-Identifier: Apache-2.0
// Each real GPU presented as several: virtual device v is real device
// v / per_gpu. The daemon's paths over several GPUs of a node (a fusion
// buffer and stream per GPU, NCCL over the node's GPUs) then run on a
// machine with fewer GPUs than they need, for tests: NCCL >= 2.30 lets
// several of its ranks share a GPU (NCCL_MULTI_RANK_GPU_ENABLE=1). Every
// call that names a device is passed on with the real one; the rest as is.
#pragma once

#include <vector>

#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/gpu_backend.h"

namespace gradsync::gpu {

class VirtualGpus : public GpuBackend, public DeviceOps {
 public:
  VirtualGpus(GpuBackend* backend, DeviceOps* ops, int per_gpu) : backend_(backend), ops_(ops), per_gpu_(per_gpu) {}

  int real(int device) const { return device < 0 ? device : device / per_gpu_; }

  // GpuBackend
  StatusOr<MappedMemory> openMemory(int device, const std::string& handle) override {
    return backend_->openMemory(real(device), handle);
  }
  StatusOr<MappedMemory> openChunks(int device, std::vector<UniqueFd> fds,
                                    const std::vector<uint64_t>& chunk_bytes) override {
    return backend_->openChunks(real(device), std::move(fds), chunk_bytes);
  }
  Status closeMemory(int device, void* address) override { return backend_->closeMemory(real(device), address); }
  StatusOr<void*> openEvent(int device, const std::string& handle) override {
    return backend_->openEvent(real(device), handle);
  }
  StatusOr<SharedEvent> createSharedEvent(int device) override { return backend_->createSharedEvent(real(device)); }
  void destroyEvent(int device, void* event) override { backend_->destroyEvent(real(device), event); }
  StatusOr<void*> createEvent(int device) override { return backend_->createEvent(real(device)); }
  void closeWhenIdle(int device, void* address, void* last_use, const std::string& what) override {
    backend_->closeWhenIdle(real(device), address, last_use, what);
  }

  // DeviceOps
  Status select(int device) override { return ops_->select(real(device)); }
  StatusOr<void*> newStream(int device) override { return ops_->newStream(real(device)); }
  Status releaseStream(int device, void* stream) override { return ops_->releaseStream(real(device), stream); }
  StatusOr<bool> eventDone(void* event) override { return ops_->eventDone(event); }
  Status recordEvent(void* event, void* stream) override { return ops_->recordEvent(event, stream); }
  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) override {
    return ops_->copy(dst, src, bytes, kind, stream);
  }
  Status reduce(const cuda::LocalReduceArgs& args, void* stream) override { return ops_->reduce(args, stream); }
  Status waitStream(void* stream, const std::string& what) override { return ops_->waitStream(stream, what); }
  StatusOr<bool> streamIdle(void* stream) override { return ops_->streamIdle(stream); }
  StatusOr<void*> allocate(int device, size_t bytes, void* stream) override {
    return ops_->allocate(real(device), bytes, stream);
  }
  void release(int device, void* data, void* stream) override { ops_->release(real(device), data, stream); }
  StatusOr<void*> newTimedEvent(int device) override { return ops_->newTimedEvent(real(device)); }
  StatusOr<float> elapsedMs(void* from, void* to) override { return ops_->elapsedMs(from, to); }
  void destroyTimedEvent(int device, void* event) override { ops_->destroyTimedEvent(real(device), event); }

 private:
  GpuBackend* const backend_;
  DeviceOps* const ops_;
  const int per_gpu_;
};

}  // namespace gradsync::gpu
