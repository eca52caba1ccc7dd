// SPDX-License-Identifier: Apache-2.0
// The daemon's GPUs, found by UUID (never by ordinal: CUDA_VISIBLE_DEVICES
// differs from process to process), with what imports clients' memory on
// them (GpuBackend) and what runs collectives on them (DeviceOps). Absent
// (null) on a node without GPUs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/gpu_backend.h"
#include "daemon/gpu/gpu_inventory.h"

namespace gradsync::gpu {

class GpuNode {
 public:
  // The node's real GPUs through the CUDA runtime; null when the inventory
  // lists none.
  static std::unique_ptr<GpuNode> create(const GpuInventory& inventory);
  // `gpus` served by one object that is both backends (tests use host-memory
  // doubles of them).
  template <typename Backend>
  static std::unique_ptr<GpuNode> withBackend(std::vector<GpuInfo> gpus, std::unique_ptr<Backend> backend) {
    std::unique_ptr<GpuNode> node(new GpuNode(std::move(gpus)));
    node->backend_ = backend.get();
    node->ops_ = backend.get();
    node->owned_ = std::shared_ptr<void>(backend.release(), [](void* p) { delete static_cast<Backend*>(p); });
    return node;
  }

  // Presents each GPU as `per_gpu` (virtual_gpus.h; tests only): GPU d
  // becomes devices d * per_gpu .. d * per_gpu + per_gpu - 1, listed in
  // `inventory` too (same UUID, the name says which of how many).
  void virtualize(int per_gpu, GpuInventory* inventory);

  GpuBackend& backend() { return *backend_; }
  DeviceOps& ops() { return *ops_; }
  // The ordinal of the GPU with `uuid`; NOT_FOUND names the GPUs there are.
  StatusOr<int> deviceOf(const std::string& uuid) const;
  // Where a rank whose memory is on GPU `uuid` goes: that GPU, or with
  // virtual GPUs the (rank mod per_gpu)-th of those it is presented as.
  StatusOr<int> placeRank(const std::string& uuid, int rank) const;
  std::vector<std::string> uuids() const;
  int count() const { return static_cast<int>(gpus_.size()); }
  int virtualPerGpu() const { return per_gpu_; }

 private:
  explicit GpuNode(std::vector<GpuInfo> gpus) : gpus_(std::move(gpus)) {}
  std::vector<GpuInfo> gpus_;
  GpuBackend* backend_ = nullptr;
  DeviceOps* ops_ = nullptr;
  std::shared_ptr<void> owned_;
  std::shared_ptr<void> virtual_;  // a VirtualGpus over owned_'s backend
  int per_gpu_ = 1;
};

}  // namespace gradsync::gpu
