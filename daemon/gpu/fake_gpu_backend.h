// SPDX-License-Identifier: Apache-2.0
// A GpuBackend that records what it was asked to do, for tests on machines
// without a GPU. Handles are "opened" into fake addresses.
#pragma once

#include <cstring>
#include <map>
#include <string>

#include "daemon/gpu/gpu_backend.h"

namespace gradsync::gpu {

class FakeGpuBackend : public GpuBackend {
 public:
  StatusOr<MappedMemory> openMemory(int device, const std::string& handle) override {
    ++memory_opens;
    if (fail_open) return internalError("cudaErrorMapBufferObjectFailed");
    void* address = reinterpret_cast<void*>(next_address_);
    next_address_ += uint64_t{1} << 32;
    if (map_host_pointers) std::memcpy(&address, handle.data(), sizeof(address));  // the handle names host memory
    open_memory[address] = handle;
    return MappedMemory{address, mapped_bytes};
  }
  StatusOr<MappedMemory> openChunks(int device, std::vector<UniqueFd> fds,
                                    const std::vector<uint64_t>& chunk_bytes) override {
    ++memory_opens;
    if (fail_open) return internalError("CUDA_ERROR_INVALID_VALUE");
    void* address = reinterpret_cast<void*>(next_address_);
    next_address_ += uint64_t{1} << 32;
    uint64_t total = 0;
    for (uint64_t bytes : chunk_bytes) total += bytes;
    open_memory[address] = std::to_string(fds.size()) + " chunks";
    return MappedMemory{address, total};
  }
  Status closeMemory(int device, void* address) override {
    if (open_memory.erase(address) == 0) return internalError("closing an address that is not open");
    return okStatus();
  }
  StatusOr<void*> openEvent(int device, const std::string& handle) override {
    void* event = reinterpret_cast<void*>(next_event_++);
    live_events[event] = "opened";
    return event;
  }
  StatusOr<SharedEvent> createSharedEvent(int device) override {
    void* event = reinterpret_cast<void*>(next_event_++);
    live_events[event] = "created";
    return SharedEvent{event, std::string(kIpcHandleBytes, static_cast<char>(next_event_ & 0xff))};
  }
  void destroyEvent(int device, void* event) override { live_events.erase(event); }
  StatusOr<void*> createEvent(int device) override {
    void* event = reinterpret_cast<void*>(next_event_++);
    live_events[event] = "plain";
    return event;
  }
  void closeWhenIdle(int device, void* address, void* last_use, const std::string& what) override {
    ++deferred_closes;
    if (stuck) return;  // its last work never finishes: stays mapped
    (void)closeMemory(device, address);
    destroyEvent(device, last_use);
  }

  int memory_opens = 0;
  int deferred_closes = 0;
  bool fail_open = false;
  bool stuck = false;                         // waits for a mapping's last use time out
  uint64_t mapped_bytes = uint64_t{1} << 40;  // what the "driver" says an allocation holds
  // Handles carry a host pointer in their first bytes, and "opening" one
  // gives that pointer (tests of the executor on host memory).
  bool map_host_pointers = false;
  std::map<void*, std::string> open_memory;
  std::map<void*, std::string> live_events;

 private:
  uint64_t next_address_ = uint64_t{1} << 40;
  uint64_t next_event_ = 0x1000;
};

}  // namespace gradsync::gpu
