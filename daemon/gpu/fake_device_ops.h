// SPDX-License-Identifier: Apache-2.0
// DeviceOps on host memory, for tests of the GPU executor on machines
// without a GPU: "device" memory is host memory, kernels are the CPU
// kernels (same semantics), copies are memcpy, everything runs at once.
// Event waits and records are logged in order, so tests can check that a
// rank's ready event is waited for before anything touches its tensor and
// its done event recorded after. As the CUDA runtime, a kernel or copy on
// a stream of another device than the thread's current one fails.
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/gpu/device_ops.h"

namespace gradsync::gpu {

class FakeDeviceOps : public DeviceOps {
 public:
  Status select(int device) override {
    current_device_ = device;
    return okStatus();
  }
  StatusOr<void*> newStream(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++streams_made;
    void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(0x5000 + streams_made));
    stream_devices_[stream] = device;
    return stream;
  }
  Status releaseStream(int device, void* stream) override {
    ++streams_released;
    return okStatus();
  }
  StatusOr<bool> eventDone(void* event) override {
    if (never_done.count(event) > 0) return false;
    log.push_back("wait " + name(event));
    return true;
  }
  Status recordEvent(void* event, void* stream) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (timed_.count(event) > 0) {
        *static_cast<std::chrono::steady_clock::time_point*>(event) = std::chrono::steady_clock::now();
        return okStatus();
      }
    }
    log.push_back("record " + name(event));
    return okStatus();
  }
  Status copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) override {
    RETURN_IF_ERROR(checkCurrent(stream, "copy"));
    std::memmove(dst, src, bytes);
    log.push_back("copy");
    return okStatus();
  }
  Status reduce(const cuda::LocalReduceArgs& args, void* stream) override {
    RETURN_IF_ERROR(checkCurrent(stream, "kernel"));
    reduce::ReduceArgs cpu;
    cpu.dtype = static_cast<DataType>(args.dtype);
    cpu.op = static_cast<ReduceOp>(args.op);
    cpu.inputs = args.inputs;
    cpu.num_inputs = args.num_inputs;
    cpu.outputs = args.outputs;
    cpu.num_outputs = args.num_outputs;
    cpu.prescale = args.prescale;
    cpu.postscale = args.postscale;
    cpu.average_divisor = args.average_divisor;
    RETURN_IF_ERROR(reduce::validateReduceArgs(cpu));
    reduce::reduceRange(cpu, 0, args.count);
    log.push_back("reduce");
    return okStatus();
  }
  Status waitStream(void* stream, const std::string& what) override { return okStatus(); }
  StatusOr<bool> streamIdle(void* stream) override { return true; }  // the work ran at once
  StatusOr<void*> allocate(int device, size_t bytes, void* stream) override {
    ++allocations;
    return std::calloc(bytes, 1);
  }
  void release(int device, void* data, void* stream) override { std::free(data); }
  // A timed event holds the host time of its last record (the work before
  // it ran at once); its records are not logged.
  StatusOr<void*> newTimedEvent(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* event = new std::chrono::steady_clock::time_point();
    timed_.insert(event);
    return static_cast<void*>(event);
  }
  StatusOr<float> elapsedMs(void* from, void* to) override {
    using Time = std::chrono::steady_clock::time_point;
    return std::chrono::duration<float, std::milli>(*static_cast<Time*>(to) - *static_cast<Time*>(from)).count();
  }
  void destroyTimedEvent(int device, void* event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    timed_.erase(event);
    delete static_cast<std::chrono::steady_clock::time_point*>(event);
  }

  // Events are named by the test (ClientGpu's fake backend makes them).
  static std::string name(void* event) { return std::to_string(reinterpret_cast<uintptr_t>(event)); }

  // A stream this made must belong to the thread's current device.
  Status checkCurrent(void* stream, const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = stream_devices_.find(stream);
    if (it == stream_devices_.end() || it->second == current_device_) return okStatus();
    return internalError(std::string(what) + " on a stream of device " + std::to_string(it->second) + " while device " +
                         std::to_string(current_device_) + " is current");
  }

  std::vector<std::string> log;
  std::set<void*> never_done;  // events whose work never finishes (a client died)
  int streams_made = 0;
  int streams_released = 0;
  int allocations = 0;

 private:
  inline static thread_local int current_device_ = 0;
  std::mutex mutex_;
  std::map<void*, int> stream_devices_;
  std::set<void*> timed_;
};

}  // namespace gradsync::gpu
