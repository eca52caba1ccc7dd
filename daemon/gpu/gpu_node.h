// SPDX-License-Identifier: Apache-2.0
// The daemon's GPUs, found by UUID (never by ordinal: CUDA_VISIBLE_DEVICES
// differs from process to process), and the backend that imports clients'
// memory on them. Absent (null) on a node without GPUs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/gpu/cuda_backend.h"
#include "daemon/gpu/gpu_inventory.h"

namespace gradsync::gpu {

class GpuNode {
 public:
  // Null when the inventory lists no GPU.
  static std::unique_ptr<GpuNode> create(const GpuInventory& inventory);

  CudaBackend& backend() { return *backend_; }
  // The ordinal of the GPU with `uuid`; NOT_FOUND names the GPUs there are.
  StatusOr<int> deviceOf(const std::string& uuid) const;
  std::vector<std::string> uuids() const;

 private:
  explicit GpuNode(const GpuInventory& inventory);
  std::vector<GpuInfo> gpus_;
  std::unique_ptr<CudaBackend> backend_;
};

}  // namespace gradsync::gpu
