// SPDX-License-Identifier: Apache-2.0
// The few CUDA calls behind importing a client's memory and events, as an
// interface: the real one (cuda_backend.h) runs on a GPU; tests of the
// bookkeeping around it (client_gpu.h) use a fake and run anywhere.
#pragma once

#include <string>

#include "daemon/common/status.h"

namespace gradsync::gpu {

// cudaIpcMemHandle_t and cudaIpcEventHandle_t are both 64 opaque bytes.
constexpr size_t kIpcHandleBytes = 64;

struct SharedEvent {
  void* event = nullptr;  // cudaEvent_t
  std::string handle;     // its cudaIpcEventHandle_t, for the other process
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // Maps another process's allocation (cudaIpcOpenMemHandle); milliseconds.
  virtual StatusOr<void*> openMemory(int device, const std::string& handle) = 0;
  virtual Status closeMemory(int device, void* address) = 0;
  // Opens another process's interprocess event.
  virtual StatusOr<void*> openEvent(int device, const std::string& handle) = 0;
  // Creates an interprocess event (DisableTiming) and exports it.
  virtual StatusOr<SharedEvent> createSharedEvent(int device) = 0;
  virtual void destroyEvent(int device, void* event) = 0;
  // Waits until every stream of the daemon on `device` is idle: nothing still
  // reads or writes memory about to be unmapped.
  virtual Status synchronize(int device) = 0;
};

}  // namespace gradsync::gpu
