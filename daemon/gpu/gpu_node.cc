// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/gpu_node.h"

#include "daemon/gpu/cuda_backend.h"

namespace gradsync::gpu {

std::unique_ptr<GpuNode> GpuNode::create(const GpuInventory& inventory) {
  if (inventory.gpus.empty()) return nullptr;
  return withBackend(inventory.gpus, std::make_unique<CudaBackend>(static_cast<int>(inventory.gpus.size())));
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
