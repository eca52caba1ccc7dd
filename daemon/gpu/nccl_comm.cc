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
                                                     int nranks, int first_rank, const std::vector<int>& devices,
                                                     const std::string& label, const WaitLimit& limit) {
  ncclUniqueId unique{};
  if (id.size() != sizeof(unique.internal))
    return invalidArgument("NCCL id of " + std::to_string(id.size()) + " bytes");
  if (devices.empty() || first_rank < 0 || first_rank + static_cast<int>(devices.size()) > nranks) {
    return invalidArgument("NCCL ranks " + std::to_string(first_rank) + " +" + std::to_string(devices.size()) + " of " +
                           std::to_string(nranks));
  }
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  std::unique_ptr<NcclComm> result(new NcclComm(nccl, ops, first_rank, devices, label));
  result->nranks_ = nranks;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  (void)nccl.api().groupStart();
  ncclResult_t started = ncclSuccess;
  for (size_t i = 0; i < devices.size() && (started == ncclSuccess || started == ncclInProgress); ++i) {
    Status selected = ops->select(devices[i]);
    if (!selected.isOk()) {
      (void)nccl.api().groupEnd();
      return selected;
    }
    ncclComm_t comm = nullptr;
    started = nccl.api().commInitRankConfig(&comm, nranks, unique, first_rank + static_cast<int>(i), &config);
    if (comm != nullptr) result->comms_.push_back(comm);
  }
  const ncclResult_t ended = nccl.api().groupEnd();
  if (started == ncclSuccess || started == ncclInProgress) started = ended;
  if ((started != ncclSuccess && started != ncclInProgress) || result->comms_.size() != devices.size()) {
    return internalError("ncclCommInitRankConfig (ranks " + std::to_string(first_rank) + " +" +
                         std::to_string(devices.size()) + " of " + std::to_string(nranks) +
                         "): " + nccl.errorText(started));
  }
  RETURN_IF_ERROR(result->waitDone({}, limit, "forming the NCCL communicator " + label));
  return result;
}

StatusOr<std::unique_ptr<NcclComm>> NcclComm::split(bool member, int color, int key, const std::string& label,
                                                    const WaitLimit& limit) {
  if (aborted_) return failedPrecondition("ncclCommSplit: the NCCL communicator " + label_ + " was aborted");
  if (comms_.size() != 1) {
    return internalError("ncclCommSplit " + label_ + ": " + std::to_string(comms_.size()) + " ranks here, not 1");
  }
  RETURN_IF_ERROR(ops_->select(devices_.front()));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t made = nullptr;
  const ncclResult_t started =
      nccl_.api().commSplit(comms_.front(), member ? color : NCCL_SPLIT_NOCOLOR, key, &made, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    abort();
    return internalError("ncclCommSplit " + label_ + ": " + nccl_.errorText(started));
  }
  // The parent reports the split's progress (and any failure of it).
  RETURN_IF_ERROR(waitDone({}, limit, "ncclCommSplit " + label_));
  if (!member) return std::unique_ptr<NcclComm>();
  if (made == nullptr)
    return internalError("ncclCommSplit " + label_ + ": no communicator for color " + std::to_string(color));
  std::unique_ptr<NcclComm> result(new NcclComm(nccl_, ops_, 0, devices_, label));
  result->comms_.push_back(made);
  RETURN_IF_ERROR(result->waitDone({}, limit, "forming the NCCL communicator " + label));
  int rank = 0, count = 0;
  // The new rank and size, as NCCL numbered them.
  if (nccl_.api().commUserRank(made, &rank) == ncclSuccess && nccl_.api().commCount(made, &count) == ncclSuccess) {
    result->first_rank_ = rank;
    result->nranks_ = count;
    return result;
  }
  return internalError("ncclCommSplit " + label + ": the new communicator's rank is unknown");
}

NcclComm::~NcclComm() {
  // Finalize can wait on peers: abort is the bounded way out.
  abort();
}

void NcclComm::abort() {
  if (aborted_) return;
  aborted_ = true;
  for (ncclComm_t comm : comms_) (void)nccl_.api().commAbort(comm);
}

Status NcclComm::waitDone(const std::vector<void*>& streams, const WaitLimit& limit, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + limit.timeout;
  for (auto pause = std::chrono::microseconds(20);; pause = std::min(pause * 2, std::chrono::microseconds(1000))) {
    bool done = true;
    // A failed rank here; of several, one that failed itself rather than
    // through another (ncclRemoteError): its error names the cause.
    ncclComm_t failed = nullptr;
    ncclResult_t failure = ncclSuccess;
    for (ncclComm_t comm : comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t polled = nccl_.api().commGetAsyncError(comm, &state);
      if (polled != ncclSuccess) state = polled;
      if (state != ncclSuccess && state != ncclInProgress &&
          (failed == nullptr || (failure == ncclRemoteError && state != ncclRemoteError))) {
        failed = comm;
        failure = state;
      }
      done = done && state == ncclSuccess;
    }
    if (failed != nullptr) {
      // Copied before the abort, which frees the communicator and its text.
      const char* last = nccl_.api().getLastError ? nccl_.api().getLastError(failed) : nullptr;
      const std::string detail = last != nullptr ? last : "";
      abort();
      return internalError(what + ": " + nccl_.errorText(failure) + (detail.empty() ? "" : " (" + detail + ")"));
    }
    for (size_t i = 0; done && i < streams.size(); ++i) {
      if (streams[i] == nullptr) continue;
      StatusOr<bool> idle = ops_->streamIdle(streams[i]);
      if (!idle.isOk()) return internalError(what + ": " + idle.status().message());
      done = *idle;
    }
    if (done) return okStatus();
    if (limit.interrupted) {
      if (Status why = limit.interrupted(); !why.isOk()) {
        abort();
        return Status(why.code(), what + ": " + why.message() + "; the communicator was aborted");
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      abort();
      return deadlineExceeded(what + ": not done within " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit.timeout).count()) +
                              " s; the communicator was aborted");
    }
    std::this_thread::sleep_for(pause);
  }
}

Status NcclComm::grouped(const std::vector<void*>& buffers, const std::vector<void*>& streams, const char* name,
                         const std::function<ncclResult_t(size_t)>& call) {
  if (aborted_) return failedPrecondition(std::string(name) + ": the NCCL communicator " + label_ + " was aborted");
  if (buffers.size() != comms_.size() || streams.size() != comms_.size()) {
    return internalError(std::string(name) + ": " + std::to_string(buffers.size()) + " buffers for " +
                         std::to_string(comms_.size()) + " ranks");
  }
  (void)nccl_.api().groupStart();
  ncclResult_t issued = ncclSuccess;
  for (size_t i = 0; i < comms_.size() && (issued == ncclSuccess || issued == ncclInProgress); ++i) {
    Status selected = ops_->select(devices_[i]);
    if (!selected.isOk()) {
      (void)nccl_.api().groupEnd();
      abort();
      return selected;
    }
    issued = call(i);
  }
  const ncclResult_t ended = nccl_.api().groupEnd();
  if (issued == ncclSuccess || issued == ncclInProgress) issued = ended;
  if (issued != ncclSuccess && issued != ncclInProgress) {
    abort();
    return internalError(std::string(name) + " " + label_ + ": " + nccl_.errorText(issued));
  }
  return okStatus();
}

Status NcclComm::broadcast(const std::vector<void*>& buffers, size_t bytes, int root, const std::vector<void*>& streams,
                           const WaitLimit& limit) {
  RETURN_IF_ERROR(grouped(buffers, streams, "ncclBroadcast", [&](size_t i) {
    return nccl_.api().broadcast(buffers[i], buffers[i], bytes, ncclUint8, root, comms_[i],
                                 static_cast<cudaStream_t>(streams[i]));
  }));
  return waitDone(streams, limit, "ncclBroadcast " + label_);
}

Status NcclComm::allGather(const std::vector<void*>& buffers, size_t bytes, const std::vector<void*>& streams,
                           const WaitLimit& limit) {
  RETURN_IF_ERROR(grouped(buffers, streams, "ncclAllGather", [&](size_t i) {
    // The rank's own block: i counts the ranks held here, first_rank_ on.
    uint8_t* own = static_cast<uint8_t*>(buffers[i]) + (static_cast<size_t>(first_rank_) + i) * bytes;
    return nccl_.api().allGather(own, buffers[i], bytes, ncclUint8, comms_[i], static_cast<cudaStream_t>(streams[i]));
  }));
  return waitDone(streams, limit, "ncclAllGather " + label_);
}

Status NcclComm::exchange(const void* send, const std::vector<PeerBytes>& send_to, void* recv,
                          const std::vector<PeerBytes>& recv_from, void* stream, const WaitLimit& limit) {
  if (comms_.size() != 1 || send_to.size() != static_cast<size_t>(nranks_) ||
      recv_from.size() != static_cast<size_t>(nranks_)) {
    return internalError("ncclSend/ncclRecv " + label_ + ": " + std::to_string(send_to.size()) + " and " +
                         std::to_string(recv_from.size()) + " parts for " + std::to_string(nranks_) + " ranks, " +
                         std::to_string(comms_.size()) + " here");
  }
  RETURN_IF_ERROR(grouped({recv}, {stream}, "ncclSend/ncclRecv", [&](size_t) {
    const auto s = static_cast<cudaStream_t>(stream);
    for (int p = 0; p < nranks_; ++p) {
      if (p == first_rank_) continue;
      const PeerBytes& out = send_to[p];
      const PeerBytes& in = recv_from[p];
      if (out.bytes > 0) {
        const ncclResult_t sent =
            nccl_.api().send(static_cast<const uint8_t*>(send) + out.offset, out.bytes, ncclUint8, p, comms_[0], s);
        if (sent != ncclSuccess && sent != ncclInProgress) return sent;
      }
      if (in.bytes > 0) {
        const ncclResult_t received =
            nccl_.api().recv(static_cast<uint8_t*>(recv) + in.offset, in.bytes, ncclUint8, p, comms_[0], s);
        if (received != ncclSuccess && received != ncclInProgress) return received;
      }
    }
    return ncclSuccess;
  }));
  return waitDone({stream}, limit, "ncclSend/ncclRecv " + label_);
}

Status NcclComm::allReduce(const std::vector<void*>& buffers, size_t count, DataType dtype, ReduceOp op,
                           const std::vector<void*>& streams, const WaitLimit& limit) {
  ncclDataType_t type;
  ncclRedOp_t red;
  if (!ncclTypeOf(dtype, &type) || !ncclOpOf(op, &red)) {
    return invalidArgument("NCCL cannot reduce " + dataTypeName(dtype) + " with " + reduceOpName(op));
  }
  RETURN_IF_ERROR(grouped(buffers, streams, "ncclAllReduce", [&](size_t i) {
    return nccl_.api().allReduce(buffers[i], buffers[i], count, type, red, comms_[i],
                                 static_cast<cudaStream_t>(streams[i]));
  }));
  return waitDone(streams, limit, "ncclAllReduce " + label_);
}

}  // namespace gradsync::gpu
