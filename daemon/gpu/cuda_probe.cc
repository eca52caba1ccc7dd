// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/cuda_probe.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace gradsync::gpu {

CudaProbe probeCuda() {
  CudaProbe probe;
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) probe.nccl_version = nccl;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    probe.note = std::string(cudaGetErrorName(err)) + " (" + std::to_string(static_cast<int>(err)) + ")";
    return probe;
  }
  probe.devices = count;
  return probe;
}

}  // namespace gradsync::gpu
