// SPDX-License-Identifier: Apache-2.0
#include "client/src/cuda/cuda_driver.h"

#include "base/gpu_uuid.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace gradsync::client {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct DriverApi {
  CUresult (*getErrorName)(CUresult, const char**) = nullptr;
  CUresult (*pointerGetAttributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*deviceGetUuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*ipcGetMemHandle)(CUipcMemHandle*, CUdeviceptr) = nullptr;
  CUresult (*eventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*ipcGetEventHandle)(CUipcEventHandle*, CUevent) = nullptr;
  CUresult (*ipcOpenEventHandle)(CUevent*, CUipcEventHandle) = nullptr;
  CUresult (*eventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*streamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*eventQuery)(CUevent) = nullptr;
  CUresult (*eventDestroy)(CUevent) = nullptr;
  CUresult (*ctxPushCurrent)(CUcontext) = nullptr;
  CUresult (*ctxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memFree)(CUdeviceptr) = nullptr;
  CUresult (*memcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  // Optional (cuMem memory only): null where the driver lacks them.
  CUresult (*retainAllocationHandle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*exportToShareableHandle)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                      unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
};

class RealCudaDriver : public CudaDriver {
 public:
  explicit RealCudaDriver(DriverApi api) : api_(api) {}

  StatusOr<PointerInfo> pointerInfo(const void* pointer) override {
    CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                        CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                        CU_POINTER_ATTRIBUTE_CONTEXT,
                                        CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
    unsigned int memory_type = 0;
    unsigned long long buffer_id = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    int legacy = 0;
    int ordinal = -1;
    CUcontext context = nullptr;
    CUmemoryPool pool = nullptr;
    void* data[] = {&memory_type, &buffer_id, &start, &size, &legacy, &ordinal, &context, &pool};
    RETURN_IF_ERROR(check(api_.pointerGetAttributes(8, attributes, data, reinterpret_cast<CUdeviceptr>(pointer)),
                          "cuPointerGetAttributes"));
    PointerInfo info;
    info.device_memory = memory_type == CU_MEMORYTYPE_DEVICE;
    if (!info.device_memory) return info;
    info.buffer_id = buffer_id;
    info.base = static_cast<uint64_t>(start);
    info.size = size;
    info.legacy_ipc = legacy != 0;
    info.pool = pool != nullptr;
    info.context = context;
    CUdevice device = 0;
    RETURN_IF_ERROR(check(api_.deviceGet(&device, ordinal), "cuDeviceGet"));
    CUuuid uuid{};
    RETURN_IF_ERROR(check(api_.deviceGetUuid(&uuid, device), "cuDeviceGetUuid"));
    info.device_uuid = formatGpuUuid(reinterpret_cast<const unsigned char*>(uuid.bytes));
    return info;
  }

  StatusOr<std::string> exportMemory(void* context, uint64_t base) override {
    Scoped scoped(this, context);
    CUipcMemHandle handle{};
    RETURN_IF_ERROR(check(api_.ipcGetMemHandle(&handle, static_cast<CUdeviceptr>(base)), "cuIpcGetMemHandle"));
    return std::string(handle.reserved, sizeof(handle.reserved));
  }

  StatusOr<MemoryChunk> chunkAt(uint64_t address) override {
    CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
                                        CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID};
    void* base = nullptr;
    size_t size = 0;
    unsigned long long block_id = 0;
    void* data[] = {&base, &size, &block_id};
    RETURN_IF_ERROR(check(api_.pointerGetAttributes(3, attributes, data, static_cast<CUdeviceptr>(address)),
                          "cuPointerGetAttributes (cuMem mapping)"));
    return MemoryChunk{reinterpret_cast<uint64_t>(base), size, block_id};
  }

  StatusOr<UniqueFd> exportChunk(void* context, uint64_t address) override {
    if (api_.retainAllocationHandle == nullptr || api_.exportToShareableHandle == nullptr || api_.release == nullptr) {
      return failedPrecondition("the CUDA driver lacks cuMemExportToShareableHandle");
    }
    Scoped scoped(this, context);
    CUmemGenericAllocationHandle handle = 0;
    Status retained =
        check(api_.retainAllocationHandle(&handle, reinterpret_cast<void*>(address)), "cuMemRetainAllocationHandle");
    if (!retained.isOk()) return Status(StatusCode::kFailedPrecondition, retained.message());
    int fd = -1;
    Status exported = check(api_.exportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                            "cuMemExportToShareableHandle (POSIX file descriptor)");
    (void)api_.release(handle);  // the retain's reference
    if (!exported.isOk()) return Status(StatusCode::kFailedPrecondition, exported.message());
    return UniqueFd(fd);
  }

  StatusOr<void*> createIpcEvent(void* context, std::string* handle) override {
    Scoped scoped(this, context);
    CUevent event = nullptr;
    RETURN_IF_ERROR(check(api_.eventCreate(&event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS), "cuEventCreate"));
    CUipcEventHandle h{};
    Status got = check(api_.ipcGetEventHandle(&h, event), "cuIpcGetEventHandle");
    if (!got.isOk()) {
      api_.eventDestroy(event);
      return got;
    }
    handle->assign(h.reserved, sizeof(h.reserved));
    return static_cast<void*>(event);
  }

  StatusOr<void*> openIpcEvent(void* context, const std::string& handle) override {
    Scoped scoped(this, context);
    CUipcEventHandle h{};
    if (handle.size() != sizeof(h.reserved)) return invalidArgument("event handle of wrong size from gradsyncd");
    std::memcpy(h.reserved, handle.data(), sizeof(h.reserved));
    CUevent event = nullptr;
    RETURN_IF_ERROR(check(api_.ipcOpenEventHandle(&event, h), "cuIpcOpenEventHandle"));
    return static_cast<void*>(event);
  }

  Status recordEvent(void* context, void* event, void* stream) override {
    Scoped scoped(this, context);
    return check(api_.eventRecord(static_cast<CUevent>(event), static_cast<CUstream>(stream)), "cuEventRecord");
  }

  Status streamWaitEvent(void* context, void* stream, void* event) override {
    Scoped scoped(this, context);
    return check(api_.streamWaitEvent(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0),
                 "cuStreamWaitEvent");
  }

  StatusOr<bool> eventDone(void* context, void* event) override {
    Scoped scoped(this, context);
    const CUresult result = api_.eventQuery(static_cast<CUevent>(event));
    if (result == CUDA_ERROR_NOT_READY) return false;
    RETURN_IF_ERROR(check(result, "cuEventQuery"));
    return true;
  }

  void destroyEvent(void* context, void* event) override {
    Scoped scoped(this, context);
    (void)api_.eventDestroy(static_cast<CUevent>(event));
  }

  StatusOr<void*> createEvent(void* context) override {
    Scoped scoped(this, context);
    CUevent event = nullptr;
    RETURN_IF_ERROR(check(api_.eventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
    return static_cast<void*>(event);
  }

  StatusOr<uint64_t> allocate(void* context, uint64_t bytes) override {
    Scoped scoped(this, context);
    CUdeviceptr address = 0;
    RETURN_IF_ERROR(check(api_.memAlloc(&address, bytes), "cuMemAlloc (a staging buffer)"));
    return static_cast<uint64_t>(address);
  }

  void freeMemory(void* context, uint64_t address) override {
    Scoped scoped(this, context);
    (void)api_.memFree(static_cast<CUdeviceptr>(address));
  }

  Status copy(void* context, uint64_t dst, uint64_t src, uint64_t bytes, void* stream) override {
    Scoped scoped(this, context);
    return check(api_.memcpyDtoDAsync(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src), bytes,
                                      static_cast<CUstream>(stream)),
                 "cuMemcpyDtoDAsync");
  }

 private:
  // Makes the allocation's context current for the calls in its scope (the
  // calling thread may have none, e.g. a fresh Python thread).
  struct Scoped {
    Scoped(RealCudaDriver* d, void* context) : driver(d), pushed(context != nullptr) {
      if (pushed) pushed = d->api_.ctxPushCurrent(static_cast<CUcontext>(context)) == CUDA_SUCCESS;
    }
    ~Scoped() {
      CUcontext popped = nullptr;
      if (pushed) (void)driver->api_.ctxPopCurrent(&popped);
    }
    RealCudaDriver* driver;
    bool pushed;
  };

  Status check(CUresult result, const char* what) {
    if (result == CUDA_SUCCESS) return okStatus();
    const char* name = nullptr;
    if (api_.getErrorName == nullptr || api_.getErrorName(result, &name) != CUDA_SUCCESS) name = "unknown";
    return internalError(std::string(what) + " failed: " + name + " (" + std::to_string(static_cast<int>(result)) +
                         ")");
  }

  DriverApi api_;
};

template <typename Fn>
Status resolve(GetProcAddress get, const char* symbol, Fn* out) {
  void* address = nullptr;
  CUdriverProcAddressQueryResult found{};
  if (get(symbol, &address, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || address == nullptr) {
    return failedPrecondition(std::string("the CUDA driver lacks ") + symbol);
  }
  *out = reinterpret_cast<Fn>(address);
  return okStatus();
}

}  // namespace

StatusOr<std::unique_ptr<CudaDriver>> loadCudaDriver() {
  // Only a driver the process has loaded already: a process without one
  // holds no CUDA memory.
  void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    return failedPrecondition(
        "no CUDA driver is loaded in this process (libcuda.so.1), so no pointer can be CUDA memory");
  }
  auto get = reinterpret_cast<GetProcAddress>(::dlsym(handle, "cuGetProcAddress_v2"));
  if (get == nullptr) return failedPrecondition("the CUDA driver is older than CUDA 12 (no cuGetProcAddress_v2)");
  DriverApi api;
  RETURN_IF_ERROR(resolve(get, "cuGetErrorName", &api.getErrorName));
  RETURN_IF_ERROR(resolve(get, "cuPointerGetAttributes", &api.pointerGetAttributes));
  RETURN_IF_ERROR(resolve(get, "cuDeviceGet", &api.deviceGet));
  RETURN_IF_ERROR(resolve(get, "cuDeviceGetUuid", &api.deviceGetUuid));
  RETURN_IF_ERROR(resolve(get, "cuIpcGetMemHandle", &api.ipcGetMemHandle));
  RETURN_IF_ERROR(resolve(get, "cuEventCreate", &api.eventCreate));
  RETURN_IF_ERROR(resolve(get, "cuIpcGetEventHandle", &api.ipcGetEventHandle));
  RETURN_IF_ERROR(resolve(get, "cuIpcOpenEventHandle", &api.ipcOpenEventHandle));
  RETURN_IF_ERROR(resolve(get, "cuEventRecord", &api.eventRecord));
  RETURN_IF_ERROR(resolve(get, "cuStreamWaitEvent", &api.streamWaitEvent));
  RETURN_IF_ERROR(resolve(get, "cuEventQuery", &api.eventQuery));
  RETURN_IF_ERROR(resolve(get, "cuEventDestroy", &api.eventDestroy));
  RETURN_IF_ERROR(resolve(get, "cuCtxPushCurrent", &api.ctxPushCurrent));
  RETURN_IF_ERROR(resolve(get, "cuCtxPopCurrent", &api.ctxPopCurrent));
  RETURN_IF_ERROR(resolve(get, "cuMemAlloc", &api.memAlloc));
  RETURN_IF_ERROR(resolve(get, "cuMemFree", &api.memFree));
  RETURN_IF_ERROR(resolve(get, "cuMemcpyDtoDAsync", &api.memcpyDtoDAsync));
  (void)resolve(get, "cuMemRetainAllocationHandle", &api.retainAllocationHandle);
  (void)resolve(get, "cuMemExportToShareableHandle", &api.exportToShareableHandle);
  (void)resolve(get, "cuMemRelease", &api.release);
  return std::unique_ptr<CudaDriver>(new RealCudaDriver(api));
}

}  // namespace gradsync::client
