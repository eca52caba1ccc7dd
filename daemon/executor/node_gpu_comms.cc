// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/node_gpu_comms.h"

#include <algorithm>
#include <string>

#include "daemon/common/logging.h"

namespace gradsync::executor {

StatusOr<gpu::NcclComm*> NodeGpuComms::over(const std::vector<int>& devices, DataType dtype) {
  ncclDataType_t type;
  if (nccl_ == nullptr || failed_ || !gpu::ncclTypeOf(dtype, &type)) return nullptr;
  // The most recently used first: a job alternating between process sets
  // on different GPUs keeps a communicator for each.
  auto used = std::find_if(comms_.begin(), comms_.end(),
                           [&](const std::unique_ptr<gpu::NcclComm>& c) { return c->devices() == devices; });
  if (used != comms_.end()) {
    std::rotate(comms_.begin(), used, used + 1);
    return comms_.front().get();
  }
  std::string list;
  for (int device : devices) list += (list.empty() ? "" : ", ") + std::to_string(device);
  auto id = nccl_->uniqueId();
  auto comm = id.isOk() ? gpu::NcclComm::create(*nccl_, ops_, *id, static_cast<int>(devices.size()), 0, devices,
                                                "over this node's GPUs", std::chrono::seconds(30))
                        : StatusOr<std::unique_ptr<gpu::NcclComm>>(id.status());
  if (!comm.isOk()) {
    failed_ = true;
    GS_LOG(gpu, warn, "no NCCL over this node's GPUs {} ({}); CUDA tensors between them go through host memory", list,
           comm.status().message());
    return nullptr;
  }
  GS_LOG(gpu, info, "NCCL communicator over this node's GPUs {} formed", list);
  if (comms_.size() >= kMaxComms) comms_.pop_back();  // the least recently used
  comms_.insert(comms_.begin(), std::move(comm).value());
  return comms_.front().get();
}

}  // namespace gradsync::executor
