// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/nccl_comm.h"

#include <cstring>
#include <thread>

namespace gradsync::gpu {

bool ncclTypeOf(DataType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case v1::UINT8:
      *out = ncclUint8;
      return true;
    case v1::INT8:
      *out = ncclInt8;
      return true;
    case v1::INT32:
      *out = ncclInt32;
      return true;
    case v1::INT64:
      *out = ncclInt64;
      return true;
    case v1::FLOAT16:
      *out = ncclFloat16;
      return true;
    case v1::BFLOAT16:
      *out = ncclBfloat16;
      return true;
    case v1::FLOAT32:
      *out = ncclFloat32;
      return true;
    case v1::FLOAT64:
      *out = ncclFloat64;
      return true;
    default:
      return false;
  }
}

namespace {

bool ncclOpOf(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case v1::SUM:
      *out = ncclSum;
      return true;
    case v1::MIN:
      *out = ncclMin;
      return true;
    case v1::MAX:
      *out = ncclMax;
      return true;
    case v1::PRODUCT:
      *out = ncclProd;
      return true;
    default:
      return false;  // AVERAGE: callers sum, then divide
  }
}

}  // namespace

StatusOr<std::unique_ptr<NcclComm>> NcclComm::create(const NcclLibrary& nccl, DeviceOps* ops, const std::string& id,
                                                     int nranks, int rank, int device,
                                                     std::chrono::milliseconds timeout) {
  ncclUniqueId unique{};
  if (id.size() != sizeof(unique.internal))
    return invalidArgument("NCCL id of " + std::to_string(id.size()) + " bytes");
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  RETURN_IF_ERROR(ops->select(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = nccl.api().commInitRankConfig(&comm, nranks, unique, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    return internalError("ncclCommInitRankConfig (rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                         "): " + nccl.errorText(started));
  }
  std::unique_ptr<NcclComm> result(new NcclComm(nccl, ops, comm));
  RETURN_IF_ERROR(result->waitDone(nullptr, timeout, "forming the daemons' NCCL communicator"));
  return result;
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  if (aborted_) return;
  // Finalize can wait on peers: abort is the bounded way out.
  (void)nccl_.api().commAbort(comm_);
}

void NcclComm::abort() {
  if (aborted_) return;
  aborted_ = true;
  (void)nccl_.api().commAbort(comm_);
}

Status NcclComm::waitDone(cudaStream_t stream, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto pause = std::chrono::microseconds(20);; pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t polled = nccl_.api().commGetAsyncError(comm_, &state);
    if (polled != ncclSuccess) state = polled;
    if (state != ncclSuccess && state != ncclInProgress) {
      // Copied before the abort, which frees the communicator and its text.
      const char* last = nccl_.api().getLastError ? nccl_.api().getLastError(comm_) : nullptr;
      const std::string detail = last != nullptr ? last : "";
      abort();
      return internalError(what + ": " + nccl_.errorText(state) + (detail.empty() ? "" : " (" + detail + ")"));
    }
    bool stream_done = true;
    if (state == ncclSuccess && stream != nullptr) {
      StatusOr<bool> idle = ops_->streamIdle(stream);
      if (!idle.isOk()) return internalError(what + ": " + idle.status().message());
      stream_done = *idle;
    }
    if (state == ncclSuccess && stream_done) return okStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      abort();
      return deadlineExceeded(what + ": not done within " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                              " s; the communicator was aborted");
    }
    std::this_thread::sleep_for(pause);
  }
}

Status NcclComm::broadcast(void* data, size_t bytes, int root, cudaStream_t stream, std::chrono::milliseconds timeout) {
  if (aborted_) return failedPrecondition("the daemons' NCCL communicator was aborted");
  const ncclResult_t issued = nccl_.api().broadcast(data, data, bytes, ncclUint8, root, comm_, stream);
  if (issued != ncclSuccess && issued != ncclInProgress) {
    abort();
    return internalError("ncclBroadcast: " + nccl_.errorText(issued));
  }
  return waitDone(stream, timeout, "ncclBroadcast among the daemons");
}

Status NcclComm::allReduce(void* data, size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                           std::chrono::milliseconds timeout) {
  if (aborted_) return failedPrecondition("the daemons' NCCL communicator was aborted");
  ncclDataType_t type;
  ncclRedOp_t red;
  if (!ncclTypeOf(dtype, &type) || !ncclOpOf(op, &red)) {
    return invalidArgument("NCCL cannot reduce " + dataTypeName(dtype) + " with " + reduceOpName(op));
  }
  const ncclResult_t issued = nccl_.api().allReduce(data, data, count, type, red, comm_, stream);
  if (issued != ncclSuccess && issued != ncclInProgress) {
    abort();
    return internalError("ncclAllReduce: " + nccl_.errorText(issued));
  }
  return waitDone(stream, timeout, "ncclAllReduce among the daemons");
}

}  // namespace gradsync::gpu
