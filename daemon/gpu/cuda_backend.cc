// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/cuda_backend.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "daemon/common/logging.h"

namespace gradsync::gpu {

std::string cudaErrorText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + std::to_string(static_cast<int>(err)) +
         "): " + cudaGetErrorString(err);
}

namespace {

Status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return okStatus();
  return internalError(std::string(what) + ": " + cudaErrorText(err));
}

// A driver function through the runtime's entry-point lookup (no link to
// the driver: the daemon starts on machines without one); null if absent.
void* driverEntry(const char* name) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &address, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return address;
}

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

StatusOr<AddressRange> driverAddressRange() {
  static AddressRange fn = reinterpret_cast<AddressRange>(driverEntry("cuMemGetAddressRange"));
  if (fn == nullptr) return failedPrecondition("the CUDA driver lacks cuMemGetAddressRange");
  return fn;
}

// The driver's virtual memory management calls behind importing cuMem
// memory another process exported by file descriptor.
struct VmmApi {
  CUresult (*import)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*addressFree)(CUdeviceptr, size_t) = nullptr;
};

StatusOr<const VmmApi*> vmmApi() {
  static const VmmApi api = [] {
    VmmApi a;
    a.import = reinterpret_cast<decltype(a.import)>(driverEntry("cuMemImportFromShareableHandle"));
    a.reserve = reinterpret_cast<decltype(a.reserve)>(driverEntry("cuMemAddressReserve"));
    a.map = reinterpret_cast<decltype(a.map)>(driverEntry("cuMemMap"));
    a.setAccess = reinterpret_cast<decltype(a.setAccess)>(driverEntry("cuMemSetAccess"));
    a.unmap = reinterpret_cast<decltype(a.unmap)>(driverEntry("cuMemUnmap"));
    a.release = reinterpret_cast<decltype(a.release)>(driverEntry("cuMemRelease"));
    a.addressFree = reinterpret_cast<decltype(a.addressFree)>(driverEntry("cuMemAddressFree"));
    return a;
  }();
  if (!api.import || !api.reserve || !api.map || !api.setAccess || !api.unmap || !api.release || !api.addressFree) {
    return failedPrecondition("the CUDA driver lacks the cuMem virtual memory calls");
  }
  return &api;
}

Status checkDriver(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return okStatus();
  return internalError(std::string(what) + " failed (CUresult " + std::to_string(static_cast<int>(result)) + ")");
}

// Unmaps the chunks mapped back to back from `base` and frees the range.
Status unmapChunks(const VmmApi& api, CUdeviceptr base, const std::vector<uint64_t>& chunks, size_t mapped) {
  Status first = okStatus();
  uint64_t offset = 0;
  for (size_t i = 0; i < mapped; ++i) {
    Status unmapped = checkDriver(api.unmap(base + offset, chunks[i]), "cuMemUnmap");
    if (first.isOk()) first = unmapped;
    offset += chunks[i];
  }
  uint64_t total = 0;
  for (uint64_t bytes : chunks) total += bytes;
  Status freed = checkDriver(api.addressFree(base, total), "cuMemAddressFree");
  return first.isOk() ? freed : first;
}

}  // namespace

Status waitForStream(cudaStream_t stream, std::chrono::milliseconds limit, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto pause = std::chrono::microseconds(20);; pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return okStatus();
    if (err != cudaErrorNotReady) return internalError(what + ": " + cudaErrorText(err));
    if (std::chrono::steady_clock::now() > deadline) {
      return deadlineExceeded(what + ": the GPU did not finish within " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) +
                              " s (work waiting on a client that died?)");
    }
    std::this_thread::sleep_for(pause);
  }
}

CudaBackend::CudaBackend(int device_count)
    : device_count_(device_count),
      streams_(static_cast<size_t>(device_count)),
      pools_configured_(static_cast<size_t>(device_count), false) {}

CudaBackend::~CudaBackend() {
  {
    MutexLock lock(reap_mutex_);
    stopping_ = true;  // mappings still pending stay mapped: the process ends
  }
  reap_cv_.notify_one();
  if (reaper_.joinable()) reaper_.join();
  // Jobs release their streams; anything left is destroyed once drained
  // (bounded: the daemon exits promptly even if queued work never ends).
  for (size_t d = 0; d < streams_.size(); ++d) {
    for (cudaStream_t s : std::vector<cudaStream_t>(streams_[d])) {
      (void)releaseStream(static_cast<int>(d), static_cast<void*>(s));
    }
  }
}

Status CudaBackend::select(int device) {
  if (device < 0 || device >= device_count_) {
    return invalidArgument("no CUDA device " + std::to_string(device));
  }
  return check(cudaSetDevice(device), "cudaSetDevice");
}

StatusOr<MappedMemory> CudaBackend::openMemory(int device, const std::string& handle) {
  RETURN_IF_ERROR(select(device));
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) return invalidArgument("IPC memory handle of wrong size");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* address = nullptr;
  RETURN_IF_ERROR(check(cudaIpcOpenMemHandle(&address, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"));
  // The allocation's true extent, from the driver (cuMemGetAddressRange).
  Status sized = okStatus();
  auto range = driverAddressRange();
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (!range.isOk()) {
    sized = range.status();
  } else {
    const CUresult got = (*range)(&base, &bytes, reinterpret_cast<CUdeviceptr>(address));
    if (got != CUDA_SUCCESS) sized = internalError("cuMemGetAddressRange failed (" + std::to_string(got) + ")");
    if (sized.isOk() && reinterpret_cast<void*>(base) != address) {
      sized = internalError("the mapping does not start at its allocation's base");
    }
  }
  if (!sized.isOk()) {
    (void)cudaIpcCloseMemHandle(address);
    return sized;
  }
  return MappedMemory{address, static_cast<uint64_t>(bytes)};
}

StatusOr<MappedMemory> CudaBackend::openChunks(int device, std::vector<UniqueFd> fds,
                                               const std::vector<uint64_t>& chunk_bytes) {
  RETURN_IF_ERROR(select(device));
  ASSIGN_OR_RETURN(const VmmApi* api, vmmApi());
  if (fds.size() != chunk_bytes.size() || fds.empty()) return invalidArgument("cuMem chunks without descriptors");
  uint64_t total = 0;
  for (uint64_t bytes : chunk_bytes) total += bytes;
  CUdeviceptr base = 0;
  RETURN_IF_ERROR(checkDriver(api->reserve(&base, total, 0, 0, 0), "cuMemAddressReserve"));
  size_t mapped = 0;
  Status status = okStatus();
  for (uint64_t offset = 0; mapped < fds.size() && status.isOk(); offset += chunk_bytes[mapped++]) {
    CUmemGenericAllocationHandle handle = 0;
    status = checkDriver(api->import(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fds[mapped].get())),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                         "cuMemImportFromShareableHandle");
    if (!status.isOk()) break;
    // The mapping keeps the memory; the handle goes at once.
    status = checkDriver(api->map(base + offset, chunk_bytes[mapped], 0, handle, 0), "cuMemMap");
    (void)api->release(handle);
    if (!status.isOk()) break;
  }
  if (status.isOk()) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = checkDriver(api->setAccess(base, total, &access, 1), "cuMemSetAccess");
  }
  if (!status.isOk()) {
    (void)unmapChunks(*api, base, chunk_bytes, mapped);
    return Status(status.code(),
                  "chunk " + std::to_string(mapped) + " of " + std::to_string(fds.size()) + ": " + status.message());
  }
  MutexLock lock(mutex_);
  chunked_[reinterpret_cast<void*>(base)] = chunk_bytes;
  return MappedMemory{reinterpret_cast<void*>(base), total};
}

Status CudaBackend::unmap(void* address) {
  std::vector<uint64_t> chunks;
  {
    MutexLock lock(mutex_);
    auto it = chunked_.find(address);
    if (it != chunked_.end()) {
      chunks = std::move(it->second);
      chunked_.erase(it);
    }
  }
  if (chunks.empty()) return check(cudaIpcCloseMemHandle(address), "cudaIpcCloseMemHandle");
  ASSIGN_OR_RETURN(const VmmApi* api, vmmApi());
  return unmapChunks(*api, reinterpret_cast<CUdeviceptr>(address), chunks, chunks.size());
}

Status CudaBackend::closeMemory(int device, void* address) {
  RETURN_IF_ERROR(select(device));
  return unmap(address);
}

StatusOr<void*> CudaBackend::openEvent(int device, const std::string& handle) {
  RETURN_IF_ERROR(select(device));
  if (handle.size() != sizeof(cudaIpcEventHandle_t)) return invalidArgument("IPC event handle of wrong size");
  cudaIpcEventHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(check(cudaIpcOpenEventHandle(&event, h), "cudaIpcOpenEventHandle"));
  return static_cast<void*>(event);
}

StatusOr<SharedEvent> CudaBackend::createSharedEvent(int device) {
  RETURN_IF_ERROR(select(device));
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventInterprocess),
                        "cudaEventCreateWithFlags"));
  cudaIpcEventHandle_t h;
  const cudaError_t err = cudaIpcGetEventHandle(&h, event);
  if (err != cudaSuccess) {
    (void)cudaEventDestroy(event);
    return check(err, "cudaIpcGetEventHandle");
  }
  return SharedEvent{event, std::string(reinterpret_cast<const char*>(&h), sizeof(h))};
}

void CudaBackend::destroyEvent(int device, void* event) {
  if (select(device).isOk()) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

StatusOr<void*> CudaBackend::newTimedEvent(int device) {
  RETURN_IF_ERROR(select(device));
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(check(cudaEventCreate(&event), "cudaEventCreate"));
  return static_cast<void*>(event);
}

StatusOr<float> CudaBackend::elapsedMs(void* from, void* to) {
  float ms = 0;
  RETURN_IF_ERROR(check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)),
                        "cudaEventElapsedTime"));
  return ms;
}

void CudaBackend::destroyTimedEvent(int device, void* event) { destroyEvent(device, event); }

StatusOr<void*> CudaBackend::createEvent(int device) {
  RETURN_IF_ERROR(select(device));
  cudaEvent_t event = nullptr;
  RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
  return static_cast<void*>(event);
}

void CudaBackend::closeWhenIdle(int device, void* address, void* last_use, const std::string& what) {
  MutexLock lock(reap_mutex_);
  pending_.push_back(PendingClose{device, address, last_use, what, std::chrono::steady_clock::now()});
  if (!reaper_.joinable()) reaper_ = std::thread([this] { reapLoop(); });
  reap_cv_.notify_one();
}

void CudaBackend::reapLoop() {
  MutexLock lock(reap_mutex_);
  while (!stopping_) {
    reap_cv_.wait_for(lock, std::chrono::milliseconds(5), [&]() GS_REQUIRES(reap_mutex_) { return stopping_; });
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!select(it->device).isOk()) {
        ++it;
        continue;
      }
      const cudaError_t state = cudaEventQuery(static_cast<cudaEvent_t>(it->last_use));
      if (state == cudaErrorNotReady) {
        if (!it->warned && std::chrono::steady_clock::now() - it->since > kStreamWaitLimit) {
          it->warned = true;  // stays pending: never unmapped under queued work
          GS_LOG(gpu, err, "{}: its last work has not finished after {} s; unmapping waits", it->what,
                 kStreamWaitLimit.count());
        }
        ++it;
        continue;
      }
      if (Status closed = unmap(it->address); !closed.isOk()) {
        GS_LOG(gpu, warn, "{}: unmapping: {}", it->what, closed.message());
      }
      (void)cudaEventDestroy(static_cast<cudaEvent_t>(it->last_use));
      it = pending_.erase(it);
    }
  }
}

StatusOr<void*> CudaBackend::newStream(int device) {
  RETURN_IF_ERROR(select(device));
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(
      check(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority"));
  MutexLock lock(mutex_);
  streams_[static_cast<size_t>(device)].push_back(stream);
  return static_cast<void*>(stream);
}

Status CudaBackend::releaseStream(int device, void* handle) {
  RETURN_IF_ERROR(select(device));
  auto stream = static_cast<cudaStream_t>(handle);
  {
    MutexLock lock(mutex_);
    auto& list = streams_[static_cast<size_t>(device)];
    list.erase(std::remove(list.begin(), list.end(), stream), list.end());
  }
  RETURN_IF_ERROR(waitForStream(stream, kStreamWaitLimit, "releasing a stream of device " + std::to_string(device)));
  return check(cudaStreamDestroy(stream), "cudaStreamDestroy");
}

StatusOr<bool> CudaBackend::eventDone(void* event) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  return internalError(std::string("cudaEventQuery: ") + cudaErrorText(err));
}

Status CudaBackend::recordEvent(void* event, void* stream) {
  return check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}

Status CudaBackend::copy(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) {
  const cudaMemcpyKind k = kind == CopyKind::kDeviceToDevice ? cudaMemcpyDeviceToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyHostToDevice;
  return check(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync");
}

Status CudaBackend::reduce(const cuda::LocalReduceArgs& args, void* stream) {
  const std::string launched = cuda::launchLocalReduce(args, stream);
  if (!launched.empty()) return internalError(launched);
  return okStatus();
}

StatusOr<bool> CudaBackend::streamIdle(void* stream) {
  const cudaError_t q = cudaStreamQuery(static_cast<cudaStream_t>(stream));
  if (q == cudaErrorNotReady) return false;
  RETURN_IF_ERROR(check(q, "cudaStreamQuery"));
  return true;
}

Status CudaBackend::waitStream(void* stream, const std::string& what) {
  return waitForStream(static_cast<cudaStream_t>(stream), kStreamWaitLimit, what);
}

StatusOr<void*> CudaBackend::allocate(int device, size_t bytes, void* stream) {
  RETURN_IF_ERROR(select(device));
  {
    // The default pool may hand one stream memory another freed by making it
    // wait on that stream: jobs must never wait on each other.
    MutexLock lock(mutex_);
    if (!pools_configured_[static_cast<size_t>(device)]) {
      cudaMemPool_t pool = nullptr;
      RETURN_IF_ERROR(check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool"));
      int no = 0;
      RETURN_IF_ERROR(check(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no),
                            "cudaMemPoolSetAttribute"));
      pools_configured_[static_cast<size_t>(device)] = true;
    }
  }
  void* data = nullptr;
  RETURN_IF_ERROR(
      check(cudaMallocAsync(&data, bytes, static_cast<cudaStream_t>(stream)), "cudaMallocAsync of the fusion buffer"));
  return data;
}

void CudaBackend::release(int device, void* data, void* stream) {
  if (select(device).isOk()) (void)cudaFreeAsync(data, static_cast<cudaStream_t>(stream));
}

}  // namespace gradsync::gpu
