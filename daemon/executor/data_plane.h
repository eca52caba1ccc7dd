// SPDX-License-Identifier: Apache-2.0
// The executors' view of the bytes that move among a job's daemons: which
// node holds a rank, and each collective step among the nodes' daemons.
// Implemented for jobs across daemons by peer::PeerDataPlane; a one-node job
// has SingleNodeDataPlane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "daemon/collective/ring_movement.h"

namespace gradsync::executor {

// The nodes taking part in a collective across daemons: their ring
// positions, increasing (see nodesOf in executor_util.h).
using NodeSet = std::vector<int>;

class DataPlane {
 public:
  virtual ~DataPlane() = default;
  // Whether the job spans daemons.
  virtual bool multiNode() const = 0;
  // Ring position of the node holding `rank`, and the number of nodes.
  virtual int nodeOf(int rank) const = 0;
  virtual int nodeCount() const = 0;
  // Every call below runs among the daemons of its `nodes` only (those
  // holding ranks of the collective's process set); on a node outside them
  // it does nothing and returns OK. Within one response of a batch, every
  // daemon taking part makes the same calls in the same order; responses
  // are told apart by their index in the batch (peer::PeerDataPlane), so a
  // daemon that skips a response shifts nothing. Indexed arguments ("by
  // node") are indexed by ring position among all nodes.
  //
  // The allreduce of a node-reduced buffer (in place).
  virtual Status allreduce(const NodeSet& nodes, void* data, size_t count, DataType dtype, ReduceOp op) = 0;
  // Broadcast from the node holding `root_rank`.
  virtual Status broadcast(const NodeSet& nodes, void* data, size_t bytes, int root_rank) = 0;
  // Allgather of the byte ranges each node owns (by node).
  virtual Status allgather(const NodeSet& nodes, uint8_t* buffer,
                           const std::vector<std::vector<collective::Range>>& owned) = 0;
  // Pairwise exchange (by node): sends `send_to[m]` of `send` to node m,
  // receives node m's bytes into `recv_from[m]` of `recv`.
  virtual Status alltoall(const NodeSet& nodes, const uint8_t* send, const std::vector<collective::Range>& send_to,
                          uint8_t* recv, const std::vector<collective::Range>& recv_from) = 0;
  // Reduce-scatter of this node's contribution `input` (read only; may be
  // `data`): afterwards `data` holds this node's `owned` elements (by node)
  // reduced over every node.
  virtual Status reduceScatter(const NodeSet& nodes, const void* input, void* data, DataType dtype, ReduceOp op,
                               const std::vector<std::vector<collective::ElementRange>>& owned) = 0;
  // Jobs whose every node has a GPU: what the daemons' NCCL communicator
  // of the batch's epoch forms from (the leader's id for that epoch, this
  // node's rank among the nodes, their number). An empty id: no NCCL among
  // these daemons (or the batch's epoch is over).
  struct NcclPeers {
    std::string id;
    int rank = -1;
    int nranks = 0;
    uint64_t epoch = 0;
  };
  virtual NcclPeers ncclPeers() const = 0;
  // OK while the batch may go on; the error that ends it once its epoch is
  // over or the job failed (asked while it waits in NCCL among the daemons).
  virtual Status batchRuns() const = 0;
  // A step among the daemons failed outside the calls above (NCCL among
  // the daemons' GPUs) with `status`: the response's failure is that
  // step's, not this node's local part's alone. Returns the error to
  // report, led by the job's cause when it has one (as the calls above do).
  virtual Status stepFailed(const Status& status) { return status; }
};

// A job on one daemon: one node, nothing crosses it.
class SingleNodeDataPlane : public DataPlane {
 public:
  bool multiNode() const override { return false; }
  int nodeOf(int) const override { return 0; }
  int nodeCount() const override { return 1; }
  Status allreduce(const NodeSet&, void*, size_t, DataType, ReduceOp) override { return oneNode(); }
  Status broadcast(const NodeSet&, void*, size_t, int) override { return oneNode(); }
  Status allgather(const NodeSet&, uint8_t*, const std::vector<std::vector<collective::Range>>&) override {
    return oneNode();
  }
  Status alltoall(const NodeSet&, const uint8_t*, const std::vector<collective::Range>&, uint8_t*,
                  const std::vector<collective::Range>&) override {
    return oneNode();
  }
  Status reduceScatter(const NodeSet&, const void*, void*, DataType, ReduceOp,
                       const std::vector<std::vector<collective::ElementRange>>&) override {
    return oneNode();
  }
  NcclPeers ncclPeers() const override { return {}; }
  Status batchRuns() const override { return okStatus(); }

 private:
  static Status oneNode() { return unimplemented("single-node job: nothing crosses nodes"); }
};

}  // namespace gradsync::executor
