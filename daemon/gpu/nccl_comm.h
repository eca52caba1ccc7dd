// SPDX-License-Identifier: Apache-2.0
// NCCL communicators the daemon holds ranks of: among a multi-node job's
// daemons (one rank per node, formed from the id the leader made when the
// job formed: JoinJobResponse.nccl_unique_id), and over the GPUs of one node
// that a job's ranks use (all its ranks here). Every wait is bounded: a
// non-blocking communicator is polled, and a communicator whose operation
// does not finish in time, or is interrupted (WaitLimit), is aborted.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "daemon/gpu/device_ops.h"
#include "daemon/gpu/nccl_library.h"

namespace gradsync::gpu {

// NCCL's type for a gradsync dtype; false for the ones NCCL lacks (uint16,
// int16, bool).
bool ncclTypeOf(DataType dtype, ncclDataType_t* out);

// How long an operation of a communicator may wait, and what may end it
// sooner: once `interrupted` (asked while it waits) returns an error (an
// elastic job's epoch is over, the job failed), the communicator is aborted
// and the operation returns that error.
struct WaitLimit {
  template <typename Rep, typename Period>
  WaitLimit(std::chrono::duration<Rep, Period> limit,  // NOLINT(runtime/explicit): a bare limit is one
            std::function<Status()> interrupt = nullptr)
      : timeout(std::chrono::duration_cast<std::chrono::milliseconds>(limit)), interrupted(std::move(interrupt)) {}
  std::chrono::milliseconds timeout;
  std::function<Status()> interrupted;  // null: nothing interrupts
};

// A communicator's ranks that this daemon holds: one per GPU it lists, all
// driven from this process with grouped calls (NCCL's way for a process
// with several GPUs). Among the daemons of a job, one rank per node; over a
// node's GPUs, a communicator of this daemon alone.
class NcclComm {
 public:
  // Collective: every holder of ranks calls it with the same id; this one
  // holds ranks first_rank .. first_rank + devices.size() - 1, on `devices`.
  // `ops` selects the devices and tells when a stream drained; `label`
  // ("among the daemons") names the communicator in errors.
  static StatusOr<std::unique_ptr<NcclComm>> create(const NcclLibrary& nccl, DeviceOps* ops, const std::string& id,
                                                    int nranks, int first_rank, const std::vector<int>& devices,
                                                    const std::string& label, const WaitLimit& limit);
  // Collective over every rank of this communicator (one here): the ranks
  // of the same `color` form a new one, ordered by `key`
  // (ncclCommSplit). Null, once every rank has called, for `member` false.
  StatusOr<std::unique_ptr<NcclComm>> split(bool member, int color, int key, const std::string& label,
                                            const WaitLimit& limit);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // In place, buffers[i] on the i-th device's streams[i]; returns once
  // every rank here finished (bounded by `limit`, after which the
  // communicator is aborted and unusable).
  Status allReduce(const std::vector<void*>& buffers, size_t count, DataType dtype, ReduceOp op,
                   const std::vector<void*>& streams, const WaitLimit& limit);
  // `bytes` from rank `root` to every rank, in place.
  Status broadcast(const std::vector<void*>& buffers, size_t bytes, int root, const std::vector<void*>& streams,
                   const WaitLimit& limit);
  // In place: rank i's `bytes` at buffers[i] + i * bytes go to that place
  // of every rank's buffer (nranks * bytes each).
  Status allGather(const std::vector<void*>& buffers, size_t bytes, const std::vector<void*>& streams,
                   const WaitLimit& limit);
  // One peer's part of an exchange: `bytes` at `offset` of a buffer.
  struct PeerBytes {
    size_t offset = 0;
    size_t bytes = 0;
  };
  // For a communicator with one rank here: send_to[p] of `send` to rank p
  // and recv_from[p] of `recv` from it, for every other rank p (grouped
  // ncclSend and ncclRecv; empty parts are left out, both sides alike).
  Status exchange(const void* send, const std::vector<PeerBytes>& send_to, void* recv,
                  const std::vector<PeerBytes>& recv_from, void* stream, const WaitLimit& limit);
  const std::vector<int>& devices() const { return devices_; }
  // The first rank held here, and the communicator's size.
  int rank() const { return first_rank_; }
  int size() const { return nranks_; }
  bool aborted() const { return aborted_; }

 private:
  NcclComm(const NcclLibrary& nccl, DeviceOps* ops, int first_rank, std::vector<int> devices, std::string label)
      : nccl_(nccl), ops_(ops), first_rank_(first_rank), devices_(std::move(devices)), label_(std::move(label)) {}
  // Polls the communicator's ranks (and `streams`) until all are done.
  Status waitDone(const std::vector<void*>& streams, const WaitLimit& limit, const std::string& what);
  // Issues `call(rank index)` for every rank here in one group.
  Status grouped(const std::vector<void*>& buffers, const std::vector<void*>& streams, const char* name,
                 const std::function<ncclResult_t(size_t)>& call);
  void abort();

  const NcclLibrary& nccl_;
  DeviceOps* const ops_;
  int first_rank_;
  int nranks_ = 0;
  const std::vector<int> devices_;
  const std::string label_;
  std::vector<ncclComm_t> comms_;  // parallel to devices_
  bool aborted_ = false;
};

}  // namespace gradsync::gpu
