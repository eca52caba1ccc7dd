// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <thread>

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

CudaBackend::CudaBackend(int device_count) : devices_(static_cast<size_t>(device_count)) {}

CudaBackend::~CudaBackend() {
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (cudaSetDevice(static_cast<int>(d)) != cudaSuccess) continue;
    if (devices_[d].stream != nullptr) {
      // Bounded: the daemon exits promptly even if queued work never ends.
      if (!waitForStream(devices_[d].stream, kStreamWaitLimit, "shutdown").isOk()) continue;
      (void)cudaStreamDestroy(devices_[d].stream);
    }
    if (devices_[d].scratch != nullptr) (void)cudaFree(devices_[d].scratch);
  }
  if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
}

Status CudaBackend::select(int device) {
  if (device < 0 || device >= static_cast<int>(devices_.size())) {
    return invalidArgument("no CUDA device " + std::to_string(device));
  }
  return check(cudaSetDevice(device), "cudaSetDevice");
}

StatusOr<void*> CudaBackend::openMemory(int device, const std::string& handle) {
  RETURN_IF_ERROR(select(device));
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) return invalidArgument("IPC memory handle of wrong size");
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* address = nullptr;
  RETURN_IF_ERROR(check(cudaIpcOpenMemHandle(&address, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"));
  return address;
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

Status CudaBackend::synchronize(int device) {
  RETURN_IF_ERROR(select(device));
  std::lock_guard<std::mutex> lock(mutex_);
  cudaStream_t s = devices_[static_cast<size_t>(device)].stream;
  if (s == nullptr) return okStatus();
  return waitForStream(s, kStreamWaitLimit, "device " + std::to_string(device));
}

StatusOr<cudaStream_t> CudaBackend::stream(int device) {
  RETURN_IF_ERROR(select(device));
  std::lock_guard<std::mutex> lock(mutex_);
  Device& d = devices_[static_cast<size_t>(device)];
  if (d.stream == nullptr) {
    int least = 0, greatest = 0;
    RETURN_IF_ERROR(check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"));
    RETURN_IF_ERROR(check(cudaStreamCreateWithPriority(&d.stream, cudaStreamNonBlocking, greatest),
                          "cudaStreamCreateWithPriority"));
  }
  return d.stream;
}

StatusOr<void*> CudaBackend::scratch(int device, size_t bytes) {
  RETURN_IF_ERROR(select(device));
  std::lock_guard<std::mutex> lock(mutex_);
  Device& d = devices_[static_cast<size_t>(device)];
  if (d.scratch_bytes >= bytes) return d.scratch;
  if (d.scratch != nullptr) {
    // The old buffer may still be read by queued work: wait for it.
    if (d.stream != nullptr) RETURN_IF_ERROR(waitForStream(d.stream, kStreamWaitLimit, "growing the fusion buffer"));
    RETURN_IF_ERROR(check(cudaFree(d.scratch), "cudaFree"));
    d.scratch = nullptr;
    d.scratch_bytes = 0;
  }
  RETURN_IF_ERROR(check(cudaMalloc(&d.scratch, bytes), "cudaMalloc of the fusion buffer"));
  d.scratch_bytes = bytes;
  return d.scratch;
}

}  // namespace gradsync::gpu

namespace gradsync::gpu {

StatusOr<void*> CudaBackend::pinnedHost(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pinned_bytes_ >= bytes) return pinned_;
  if (pinned_ != nullptr) {
    // Staging is synchronous (the caller waited for its copies): safe to free.
    RETURN_IF_ERROR(check(cudaFreeHost(pinned_), "cudaFreeHost"));
    pinned_ = nullptr;
    pinned_bytes_ = 0;
  }
  RETURN_IF_ERROR(check(cudaMallocHost(&pinned_, bytes), "cudaMallocHost of the staging buffer"));
  pinned_bytes_ = bytes;
  return pinned_;
}

}  // namespace gradsync::gpu
