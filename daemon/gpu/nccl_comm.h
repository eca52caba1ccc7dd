// SPDX-License-Identifier: Apache-2.0
// The NCCL communicator among a multi-node job's daemons: one rank per node
// (the node's GPU holding the job's local ranks), formed from the id the
// leader made when the job formed (JoinJobResponse.nccl_unique_id). Every
// wait is bounded: a non-blocking communicator is polled, and a communicator
// whose operation does not finish in time is aborted.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "base/dtype.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_library.h"

namespace gradsync::gpu {

// NCCL's type for a gradsync dtype; false for the ones NCCL lacks (uint16,
// int16, bool).
bool ncclTypeOf(DataType dtype, ncclDataType_t* out);

class NcclComm {
 public:
  // Collective: every node calls it with the same id and its own rank.
  // `ops` selects the device and tells when a stream drained.
  static StatusOr<std::unique_ptr<NcclComm>> create(const NcclLibrary& nccl, DeviceOps* ops, const std::string& id,
                                                    int nranks, int rank, int device,
                                                    std::chrono::milliseconds timeout);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // In place on `stream`; returns once it finished (bounded by `timeout`,
  // after which the communicator is aborted and unusable).
  Status allReduce(void* data, size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                   std::chrono::milliseconds timeout);
  // `bytes` from the node with rank `root` to every node, in place.
  Status broadcast(void* data, size_t bytes, int root, cudaStream_t stream, std::chrono::milliseconds timeout);
  bool aborted() const { return aborted_; }

 private:
  NcclComm(const NcclLibrary& nccl, DeviceOps* ops, ncclComm_t comm) : nccl_(nccl), ops_(ops), comm_(comm) {}
  // Polls the communicator (and `stream`, when given) until both are done.
  Status waitDone(cudaStream_t stream, std::chrono::milliseconds timeout, const std::string& what);
  void abort();

  const NcclLibrary& nccl_;
  DeviceOps* const ops_;
  ncclComm_t comm_;
  bool aborted_ = false;
};

}  // namespace gradsync::gpu
