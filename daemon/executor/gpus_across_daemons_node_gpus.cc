// SPDX-License-Identifier: Apache-2.0
// GpusAcrossDaemons with several GPUs here: an allreduce's batch
// reduced on each GPU (identities where a GPU holds no rank of a
// response), the GPUs combined (NodeGpus), the first GPU's buffer among the
// daemons, then back to the other GPUs and to every rank.
#include <algorithm>
#include <set>

#include "base/dtype.h"
#include "daemon/collective/cuda/local_reduce.h"
#include "daemon/collective/reduce/cpu_reduce.h"
#include "daemon/common/logging.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"
#include "daemon/executor/gpu_phase_timer.h"
#include "daemon/executor/gpus_across_daemons.h"

namespace gradsync::executor {

Status GpusAcrossDaemons::fillIdentitiesOnDevice(const FusedAllreduce& f) {
  bool waited = false;
  for (size_t t = 0; t < f.responses.size(); ++t) {
    const size_t bytes = f.responses[t]->first().length;
    if (!f.members[t].list.empty() || bytes == 0) continue;
    if (!waited) {  // a copy from pageable memory waits for the stream: bound it first
      RETURN_IF_ERROR(ops_->waitStream(f.stream, "waiting for the local reduction"));
      waited = true;
    }
    uint8_t* host = f.staging + f.offsets[t] * f.esize;
    fillIdentity(host, bytes / f.esize, f.first.dtype, f.ring_op);
    RETURN_IF_ERROR(
        context(ops_->copy(f.fused + f.offsets[t] * f.esize, host, bytes, gpu::CopyKind::kHostToDevice, f.stream),
                "identity values to the fusion buffer"));
  }
  // The staging buffer is read before the next GPU's identities go there.
  return waited ? ops_->waitStream(f.stream, "waiting for the identity values") : okStatus();
}

StatusOr<std::vector<GpusAcrossDaemons::FusedAllreduce>> GpusAcrossDaemons::viewsByGpu(
    const std::vector<const Response*>& responses, RankAccess& access, std::vector<std::vector<Members>>& groups,
    const std::vector<int>& devices) {
  const Request& first = responses.front()->first();
  const ReduceOp ring_op = first.op == v1::AVERAGE ? v1::SUM : first.op;
  std::vector<FusedAllreduce> per_gpu;
  for (int device : devices) {
    FusedAllreduce f{responses, access, first, elementSize(first.dtype), ring_op};
    for (size_t t = 0; t < responses.size(); ++t) {
      Members mine;
      for (auto& group : groups[t]) {
        if (group.device == device) mine = std::move(group);
      }
      if (responses[t]->first().length == 0) mine.list.clear();
      f.offsets.push_back(f.total);
      f.total += responses[t]->first().length / f.esize;
      f.members.push_back(std::move(mine));
    }
    ASSIGN_OR_RETURN(f.stream, gpus_->streamFor(device));
    ASSIGN_OR_RETURN(gpu::GrowingBuffer * fusion, gpus_->fusionFor(device));
    ASSIGN_OR_RETURN(f.fused, fusion->reserve(f.total * f.esize));
    f.filled = true;
    per_gpu.push_back(std::move(f));
  }
  return per_gpu;
}

Status GpusAcrossDaemons::multiGpuStagedAllreduce(const std::vector<const Response*>& responses, RankAccess& access,
                                                  std::vector<std::vector<Members>> groups,
                                                  const std::vector<int>& devices, gpu::NcclComm* comm) {
  const ReduceOp ring_op = responses.front()->first().op == v1::AVERAGE ? v1::SUM : responses.front()->first().op;
  ASSIGN_OR_RETURN(std::vector<FusedAllreduce> per_gpu, viewsByGpu(responses, access, groups, devices));
  const size_t bytes = per_gpu.front().total * per_gpu.front().esize;
  std::vector<const Members*> waited;  // their done events are recorded whatever happens next
  std::vector<Members> gpus;           // each GPU as a group without members: its device and stream
  std::vector<void*> fused;
  for (size_t i = 0; i < devices.size(); ++i) {
    gpus.emplace_back();
    gpus.back().device = devices[i];
    gpus.back().stream = per_gpu[i].stream;
    fused.push_back(per_gpu[i].fused);
  }
  const Response& head = *responses.front();
  Status status = [&]() -> Status {
    for (size_t i = 0; i < per_gpu.size(); ++i) {  // each GPU's ranks, identities where it has none
      FusedAllreduce& f = per_gpu[i];
      RETURN_IF_ERROR(ops_->select(devices[i]));
      RETURN_IF_ERROR(reduceIntoFused(f, &waited));
      f.staging = gpus_->staging(bytes);
      RETURN_IF_ERROR(fillIdentitiesOnDevice(f));
    }
    RETURN_IF_ERROR(node_gpus_->acrossGpus(head, gpus, fused, bytes, ring_op, -1, access));
    // The first GPU's buffer among the nodes, as with one GPU here.
    FusedAllreduce& lead = per_gpu.front();
    RETURN_IF_ERROR(ops_->select(devices.front()));
    lead.staging = gpus_->staging(bytes);
    RETURN_IF_ERROR(comm != nullptr ? ncclAcrossNodes(lead, comm) : stagedAcrossNodes(lead));
    RETURN_IF_ERROR(node_gpus_->acrossGpus(head, gpus, fused, bytes, ring_op, 0, access));
    for (size_t i = 0; i < per_gpu.size(); ++i) {
      RETURN_IF_ERROR(ops_->select(devices[i]));
      RETURN_IF_ERROR(scatterFromFused(per_gpu[i]));
    }
    return okStatus();
  }();
  for (const Members* m : waited) {
    (void)ops_->select(m->device);
    status = gpus_->recordDoneAfter(*m, status);
  }
  return status;
}

}  // namespace gradsync::executor
