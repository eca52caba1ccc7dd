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

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cuMemGetAddressRange through the runtime's entry-point lookup (no link to
// the driver: the daemon starts on machines without one).
StatusOr<AddressRange> driverAddressRange() {
  static AddressRange fn = [] {
    void* address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &address, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<AddressRange>(nullptr);
    }
    return reinterpret_cast<AddressRange>(address);
  }();
  if (fn == nullptr) return failedPrecondition("the CUDA driver lacks cuMemGetAddressRange");
  return fn;
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

Status CudaBackend::closeMemory(int device, void* address) {
  RETURN_IF_ERROR(select(device));
  return check(cudaIpcCloseMemHandle(address), "cudaIpcCloseMemHandle");
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
      const cudaError_t closed = cudaIpcCloseMemHandle(it->address);
      if (closed != cudaSuccess) GS_LOG(gpu, warn, "{}: unmapping: {}", it->what, cudaErrorText(closed));
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
