// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/gpu_node.h"

#include "daemon/gpu/cuda_backend.h"
#include "daemon/gpu/virtual_gpus.h"

namespace gradsync::gpu {

std::unique_ptr<GpuNode> GpuNode::create(const GpuInventory& inventory) {
  if (inventory.gpus.empty()) return nullptr;
  return withBackend(inventory.gpus, std::make_unique<CudaBackend>(static_cast<int>(inventory.gpus.size())));
}

void GpuNode::virtualize(int per_gpu, GpuInventory* inventory) {
  if (per_gpu <= 1 || per_gpu_ != 1) return;
  auto wrapper = std::make_shared<VirtualGpus>(backend_, ops_, per_gpu);
  backend_ = wrapper.get();
  ops_ = wrapper.get();
  virtual_ = std::move(wrapper);
  per_gpu_ = per_gpu;
  std::vector<GpuInfo> presented;
  for (const auto& gpu : gpus_) {
    for (int k = 0; k < per_gpu; ++k) {
      GpuInfo info = gpu;
      info.index = gpu.index * per_gpu + k;
      info.name += " (virtual GPU " + std::to_string(k + 1) + " of " + std::to_string(per_gpu) + " on device " +
                   std::to_string(gpu.index) + ")";
      info.peers.clear();
      presented.push_back(std::move(info));
    }
  }
  gpus_ = presented;
  inventory->gpus = std::move(presented);
}

StatusOr<int> GpuNode::placeRank(const std::string& uuid, int rank) const {
  ASSIGN_OR_RETURN(int device, deviceOf(uuid));
  return device + (rank < 0 ? 0 : rank % per_gpu_);
}

StatusOr<int> GpuNode::deviceOf(const std::string& uuid) const {
  std::string known;
  for (const auto& gpu : gpus_) {
    if (gpu.uuid == uuid) return gpu.index;
    known += (known.empty() ? "" : ", ") + gpu.uuid;
  }
  return notFound("GPU " + uuid + " is not one gradsyncd can use (it has " + known + ")");
}

std::vector<std::string> GpuNode::uuids() const {
  std::vector<std::string> out;
  for (const auto& gpu : gpus_) out.push_back(gpu.uuid);
  return out;
}

}  // namespace gradsync::gpu
