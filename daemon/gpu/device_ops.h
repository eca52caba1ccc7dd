// SPDX-License-Identifier: Apache-2.0
// What the GPU executor asks of a device, as an interface: CudaBackend
// (cuda_backend.h) does it on a GPU; a fake that does the same on host
// memory (fake_device_ops.h) lets the executor's logic (layouts, offsets,
// output checks, staging, event order) be tested on machines without one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/gpu/gpu_backend.h"

namespace gradsync::gpu {

enum class CopyKind { kDeviceToDevice, kDeviceToHost, kHostToDevice };

// Streams and events are opaque handles (cudaStream_t, cudaEvent_t).
class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  // Makes `device` current on the calling thread.
  virtual Status select(int device) = 0;
  virtual StatusOr<void*> newStream(int device) = 0;
  // Waits (bounded) for the stream, then destroys it.
  virtual Status releaseStream(int device, void* stream) = 0;
  // Whether the work before the event's latest record has finished (a
  // host query that never blocks: cudaEventQuery).
  virtual StatusOr<bool> eventDone(void* event) = 0;
  virtual Status recordEvent(void* event, void* stream) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) = 0;
  // The element-wise reduction of local_reduce.h, enqueued on `stream`.
  virtual Status reduce(const cuda::LocalReduceArgs& args, void* stream) = 0;
  // Host waits for the stream to drain, at most kStreamWaitLimit.
  virtual Status waitStream(void* stream, const std::string& what) = 0;
  // Whether the stream has drained (a host query that never blocks:
  // cudaStreamQuery).
  virtual StatusOr<bool> streamIdle(void* stream) = 0;
  // Device memory on `device`, ordered on `stream` (cudaMallocAsync /
  // cudaFreeAsync): neither call waits for the device, so a stream stuck on
  // a dead client's event elsewhere never blocks them.
  virtual StatusOr<void*> allocate(int device, size_t bytes, void* stream) = 0;
  virtual void release(int device, void* data, void* stream) = 0;
  // Events that keep time (cudaEventCreate), for the timeline's GPU phases:
  // made on `device`, milliseconds between two recorded and reached ones
  // (cudaEventElapsedTime), destroyed.
  virtual StatusOr<void*> newTimedEvent(int device) = 0;
  virtual StatusOr<float> elapsedMs(void* from, void* to) = 0;
  virtual void destroyTimedEvent(int device, void* event) = 0;
};

// Device memory that only grows, allocated and freed on one stream: reused
// for every batch of one job.
class GrowingBuffer {
 public:
  GrowingBuffer(DeviceOps* ops, int device, void* stream) : ops_(ops), device_(device), stream_(stream) {}
  ~GrowingBuffer() {
    if (data_ != nullptr) ops_->release(device_, data_, stream_);
  }
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  // At least `bytes`. Growing frees the old buffer after the work queued on
  // the stream so far (stream order), without waiting.
  StatusOr<uint8_t*> reserve(size_t bytes) {
    bytes = bytes < 64 ? 64 : bytes;
    if (bytes <= bytes_) return static_cast<uint8_t*>(data_);
    if (data_ != nullptr) {
      ops_->release(device_, data_, stream_);
      data_ = nullptr;
      bytes_ = 0;
    }
    ASSIGN_OR_RETURN(data_, ops_->allocate(device_, bytes, stream_));
    bytes_ = bytes;
    return static_cast<uint8_t*>(data_);
  }

 private:
  DeviceOps* const ops_;
  const int device_;
  void* const stream_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace gradsync::gpu
