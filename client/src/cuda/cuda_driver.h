// SPDX-License-Identifier: Apache-2.0
// The CUDA driver calls the client library makes, behind an interface. The
// real one (loadCudaDriver) reaches the driver that the training process has
// already loaded (PyTorch did, if it holds CUDA tensors) with
// dlopen(RTLD_NOLOAD) and cuGetProcAddress: the client adds no CUDA runtime
// of its own to the process and never loads CUDA when no CUDA tensor is seen.
// Tests use a fake.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace gradsync::client {

// What the driver says about a pointer.
struct PointerInfo {
  bool device_memory = false;  // CU_MEMORYTYPE_DEVICE
  uint64_t buffer_id = 0;      // unique within the process, never reused
  uint64_t base = 0;           // start of the allocation holding the pointer
  uint64_t size = 0;           // bytes of that allocation
  bool legacy_ipc = false;     // exportable with cuIpcGetMemHandle (cudaMalloc)
  bool pool = false;           // from a stream-ordered pool (cudaMallocAsync): exportable neither way
  std::string device_uuid;     // "GPU-..."
  void* context = nullptr;     // CUcontext the allocation belongs to
};

// One cuMem mapping (a physical allocation) of VMM memory, e.g. PyTorch's
// expandable segments: a segment is one reserved range with many mappings.
struct MemoryChunk {
  uint64_t base = 0;      // where the mapping starts
  uint64_t size = 0;      // its bytes
  uint64_t block_id = 0;  // the physical allocation's id: another one mapped there has another
};

class CudaDriver {
 public:
  virtual ~CudaDriver() = default;
  virtual StatusOr<PointerInfo> pointerInfo(const void* pointer) = 0;
  // cuIpcGetMemHandle of an allocation's base: 64 bytes.
  virtual StatusOr<std::string> exportMemory(void* context, uint64_t base) = 0;
  // The cuMem mapping holding `address`.
  virtual StatusOr<MemoryChunk> chunkAt(uint64_t address) = 0;
  // A POSIX file descriptor of the physical allocation mapped at `address`
  // (cuMemRetainAllocationHandle + cuMemExportToShareableHandle);
  // FAILED_PRECONDITION for memory that cannot be exported so (a
  // cudaMallocAsync pool).
  virtual StatusOr<UniqueFd> exportChunk(void* context, uint64_t address) = 0;
  // An interprocess event (DisableTiming) and its 64-byte handle.
  virtual StatusOr<void*> createIpcEvent(void* context, std::string* handle) = 0;
  virtual StatusOr<void*> openIpcEvent(void* context, const std::string& handle) = 0;
  virtual Status recordEvent(void* context, void* event, void* stream) = 0;
  virtual Status streamWaitEvent(void* context, void* stream, void* event) = 0;
  // Whether the work before the event's latest record finished (cuEventQuery).
  virtual StatusOr<bool> eventDone(void* context, void* event) = 0;
  virtual void destroyEvent(void* context, void* event) = 0;
  // A local event (DisableTiming).
  virtual StatusOr<void*> createEvent(void* context) = 0;
  // `bytes` of device memory on the context's device (cuMemAlloc:
  // exportable with exportMemory).
  virtual StatusOr<uint64_t> allocate(void* context, uint64_t bytes) = 0;
  virtual void freeMemory(void* context, uint64_t address) = 0;
  // `bytes` from device address `src` to `dst`, queued on `stream`
  // (cuMemcpyDtoDAsync).
  virtual Status copy(void* context, uint64_t dst, uint64_t src, uint64_t bytes, void* stream) = 0;
};

// FAILED_PRECONDITION when the process has no CUDA driver loaded.
StatusOr<std::unique_ptr<CudaDriver>> loadCudaDriver();

}  // namespace gradsync::client
