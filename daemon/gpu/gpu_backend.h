// SPDX-License-Identifier: Apache-2.0
// The few CUDA calls behind importing a client's memory and events, as an
// interface: the real one (cuda_backend.h) runs on a GPU; tests of the
// bookkeeping around it (client_gpu.h) use a fake and run anywhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace gradsync::gpu {

// How long the daemon waits for its own GPU work before giving up: work that
// waits on an event of a client that died may never finish, and no daemon
// thread may hang on it.
constexpr std::chrono::seconds kStreamWaitLimit{10};

// cudaIpcMemHandle_t and cudaIpcEventHandle_t are both 64 opaque bytes.
constexpr size_t kIpcHandleBytes = 64;

// One opened allocation: where it is mapped and how large the driver says
// it is (the client's word for its size is never trusted).
struct MappedMemory {
  void* address = nullptr;
  uint64_t bytes = 0;
};

struct SharedEvent {
  void* event = nullptr;  // cudaEvent_t
  std::string handle;     // its cudaIpcEventHandle_t, for the other process
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // Maps another process's allocation (cudaIpcOpenMemHandle); milliseconds.
  virtual StatusOr<MappedMemory> openMemory(int device, const std::string& handle) = 0;
  // Maps cuMem allocations another process exported as POSIX file
  // descriptors (PyTorch's expandable segments), back to back in one range
  // of the sum of `chunk_bytes`; the descriptors are closed. A chunk smaller
  // than its stated size fails the whole call. closeMemory and closeWhenIdle
  // unmap the range like an IPC mapping.
  virtual StatusOr<MappedMemory> openChunks(int device, std::vector<UniqueFd> fds,
                                            const std::vector<uint64_t>& chunk_bytes) = 0;
  virtual Status closeMemory(int device, void* address) = 0;
  // Opens another process's interprocess event.
  virtual StatusOr<void*> openEvent(int device, const std::string& handle) = 0;
  // Creates an interprocess event (DisableTiming) and exports it.
  virtual StatusOr<SharedEvent> createSharedEvent(int device) = 0;
  virtual void destroyEvent(int device, void* event) = 0;
  // A plain event (DisableTiming), recorded by the executor after the last
  // work that used a mapping.
  virtual StatusOr<void*> createEvent(int device) = 0;
  // Unmaps `address` and destroys `last_use` once that event completed,
  // without blocking the caller (a reaper polls); work that never finishes
  // keeps the mapping (memory leaked, never unmapped under a kernel).
  virtual void closeWhenIdle(int device, void* address, void* last_use, const std::string& what) = 0;
};

}  // namespace gradsync::gpu
