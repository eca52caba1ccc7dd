// SPDX-License-Identifier: Apache-2.0
// What the coordinator negotiates: one rank's request for a collective, and
// the response every rank of the process set executes once all agree.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace gradsync::coordinator {

// A CUDA tensor: `length` bytes at `offset` of an allocation the rank's
// client exported once (see control.proto CudaTensorRef).
struct CudaRef {
  uint64_t buffer_id = 0;
  uint64_t offset = 0;
  uint32_t event_slot = 0;
};

// One rank's request, already checked on its own (sizes match the shape, the
// range lies inside the rank's arena or its exported CUDA allocation).
struct Request {
  int rank = -1;
  uint64_t handle = 0;
  std::string name;
  CollectiveType type = v1::COLLECTIVE_TYPE_UNSPECIFIED;
  DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  ReduceOp op = v1::REDUCE_OP_UNSPECIFIED;
  double prescale = 1.0;
  double postscale = 1.0;
  int root_rank = 0;
  int process_set_id = 0;
  std::vector<int64_t> splits;  // ALLTOALL, one per member of the process set
  uint64_t offset = 0;          // input (and in-place output) bytes in the arena
  uint64_t length = 0;
  uint64_t group_id = 0;  // grouped allreduce; 0: not grouped
  uint32_t group_size = 0;
  std::optional<CudaRef> cuda;  // set: device memory, `offset` unused
  // CUDA collectives with an output of their own (allgather, alltoall,
  // reducescatter): where it goes and its size, given by the caller.
  std::optional<CudaRef> cuda_output;
  uint64_t output_length = 0;
  // Non-empty: the rank failed this collective at the call, for this reason
  // (it carries no data; the negotiated response fails on every rank).
  std::string abandoned;
  // PROCESS_SET_ADD: the new set's ranks; PROCESS_SET_REMOVE: the set's id.
  std::vector<int> set_ranks;
  int target_set = 0;
  bool commit = false;  // BARRIER: an elastic job's commit point (joiners admitted)
  // Non-zero: the rank's call number on its process set (control.proto
  // Enqueue.call); not part of the collective's metadata.
  uint64_t call = 0;
  // When this daemon took the request from its rank (for latency metrics;
  // unset for requests of other daemons' ranks).
  std::chrono::steady_clock::time_point received{};

  bool onCuda() const { return cuda.has_value(); }
};

// A negotiated collective. `requests[i]` belongs to `ranks[i]`; it is empty
// for a rank that has joined (it contributes nothing, receives nothing).
struct Response {
  std::string name;
  CollectiveType type = v1::COLLECTIVE_TYPE_UNSPECIFIED;
  int process_set_id = 0;
  std::vector<int> ranks;
  std::vector<std::optional<Request>> requests;
  // Non-OK: every present request fails with this status.
  Status status;
  // JOIN: the rank that joined last.
  int last_joined_rank = -1;
  // PROCESS_SET_ADD / PROCESS_SET_REMOVE that succeeded: the set added (its
  // new id) or removed.
  int changed_process_set = 0;
  // Elastic jobs across daemons: this commit barrier admits the waiting
  // joiners (decided by the leader before it sends the batch).
  bool admits_joiners = false;

  // The first present request (there is always one).
  const Request& first() const;
  // Number of ranks taking part with data.
  int activeCount() const;
};

// "[0, 2, 5]", for error messages.
std::string ranksString(const std::vector<int>& ranks);

}  // namespace gradsync::coordinator
