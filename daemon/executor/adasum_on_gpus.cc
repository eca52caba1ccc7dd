// SPDX-License-Identifier: Apache-2.0
#include "daemon/executor/adasum_on_gpus.h"

#include <vector>

#include "base/dtype.h"
#include "daemon/collective/reduce/adasum.h"
#include "daemon/executor/executor_util.h"
#include "daemon/executor/gpu_executor_util.h"

namespace gradsync::executor {

ResponseResult AdasumOnGpus::adasum(const Response& r, RankAccess& access) {
  auto resolved = gpus_->resolveByDevice(r, access);
  if (!resolved.isOk()) return failed(r, resolved.status());
  const std::vector<Members>& groups = *resolved;
  const Request& first = r.first();
  const size_t bytes = first.length;
  const size_t n = r.requests.size();
  // Rank i's tensor at i * bytes, the result after them.
  uint8_t* host = gpus_->staging(bytes * (n + 1) + 1);
  std::vector<size_t> offset;
  std::vector<uint8_t*> work;
  std::vector<std::vector<collective::Range>> owned(access.dataPlane().multiNode() ? access.dataPlane().nodeCount()
                                                                                   : 0);
  for (size_t i = 0; i < n; ++i) {
    offset.push_back(i * bytes);
    work.push_back(host + i * bytes);
    if (!owned.empty()) owned[access.dataPlane().nodeOf(r.requests[i]->rank)].push_back({i * bytes, bytes});
  }
  uint8_t* result = host + n * bytes;
  size_t waited = 0;  // groups whose ready events were awaited: their done events are recorded whatever happens
  Status status = [&]() -> Status {
    RETURN_IF_ERROR(stageEveryInput(r, access, groups, offset, host, &waited));
    if (!owned.empty()) RETURN_IF_ERROR(access.dataPlane().allgather(nodesOf(r, access), host, owned));
    {
      PhaseScope phase(access, "ADASUM_COMBINE");
      RETURN_IF_ERROR(context(reduce::adasum(work, bytes / elementSize(first.dtype), first.dtype, first.prescale,
                                             first.postscale, {result}),
                              "tensor '" + r.name + "'"));
    }
    PhaseScope phase(access, "MEMCPY_HOST_TO_DEVICE");
    for (const auto& group : groups) {
      if (group.device < 0 || bytes == 0) continue;
      RETURN_IF_ERROR(ops_->select(group.device));
      for (const auto& member : group.list) {
        RETURN_IF_ERROR(context(ops_->copy(member.data, result, bytes, gpu::CopyKind::kHostToDevice, group.stream),
                                "tensor '" + r.name + "': copy to rank " + std::to_string(member.rank)));
      }
    }
    return okStatus();
  }();
  status = gpus_->recordDoneOnGpus(groups, waited, status);
  return failed(r, gpus_->drainStaging(groups, status));
}

Status AdasumOnGpus::stageEveryInput(const Response& r, RankAccess& access, const std::vector<Members>& groups,
                                     const std::vector<size_t>& offset, uint8_t* host, size_t* waited) {
  std::vector<std::vector<size_t>> index;
  for (const auto& group : groups) {
    index.push_back(JobGpus::memberIndices(r, group));
    if (group.device < 0) continue;  // no elements
    RETURN_IF_ERROR(ops_->select(group.device));
    RETURN_IF_ERROR(gpus_->waitReady(group));
    ++*waited;
  }
  PhaseScope phase(access, "MEMCPY_DEVICE_TO_HOST");
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].device < 0) continue;
    RETURN_IF_ERROR(ops_->select(groups[g].device));
    RETURN_IF_ERROR(gpus_->stageInputs(r, groups[g], index[g], offset, host));
    RETURN_IF_ERROR(ops_->waitStream(groups[g].stream, "waiting for the copies to host memory"));
  }
  return okStatus();
}

}  // namespace gradsync::executor
