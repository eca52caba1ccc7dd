// SPDX-License-Identifier: Apache-2.0
// What the data plane asks of a job's membership (CrossNode): the nodes of
// an epoch and the endpoints of a ring or mesh among some of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/collective/pairwise_exchange.h"
#include "daemon/collective/ring_allreduce.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::peer {

using CrossClock = std::chrono::steady_clock;

class NodeEndpoints {
 public:
  virtual ~NodeEndpoints() = default;
  // The ring for one collective of `epoch` among the nodes at `nodes` (ring
  // positions, increasing; empty: every node), in their order; nullopt when
  // this node is not one of them. Waits for the membership until
  // `deadline`; ABORTED when `epoch` is over.
  virtual StatusOr<std::optional<collective::RingContext>> ring(const collective::TransferId& id,
                                                                CrossClock::time_point deadline, uint64_t epoch,
                                                                const std::vector<int>& nodes) = 0;
  // Endpoints to each of `nodes` (as for ring()), for a pairwise exchange or
  // a direct allreduce; the same waits and errors as ring().
  virtual StatusOr<std::optional<collective::MeshContext>> mesh(const collective::TransferId& id,
                                                                CrossClock::time_point deadline, uint64_t epoch,
                                                                const std::vector<int>& nodes) = 0;
  // The job's nodes, with the epoch they belong to.
  virtual std::vector<v1::NodeInfo> members(uint64_t* epoch) const = 0;
  // The id the daemons' NCCL communicator of `epoch` forms from (the
  // leader makes one with each epoch; empty: the leader has no NCCL, or a
  // node lacks it) and this node's position in the ring in that epoch.
  struct NcclId {
    std::string id;
    uint64_t epoch = 0;
    int self = -1;
  };
  virtual NcclId ncclId() const = 0;
  // OK while collectives of `epoch` may still run; ABORTED once the job
  // moved past it or failed, CANCELLED once it stopped. Cheap: asked often
  // while a collective waits in NCCL.
  virtual Status epochRuns(uint64_t epoch) const = 0;
  // Discards the messages of batch `sequence` of `epoch` that matched no
  // transfer here (the batch is over on this node); returns how many. The
  // thread that runs the transfers.
  virtual size_t dropBatchStrays(uint64_t epoch, uint64_t sequence) = 0;
};

}  // namespace gradsync::peer
