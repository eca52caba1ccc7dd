// SPDX-License-Identifier: Apache-2.0
// A job's endpoints on this node, as its data plane asks for them
// (NodeEndpoints): the ring or mesh of one collective among some members of
// an epoch, over the UCX endpoints to the other daemons (UcxMesh). Each
// waits for the membership (JobMembership) to form, checks that its epoch
// still runs and lifts the epoch's tags under the membership's lock (an
// interruption for a later epoch comes after it and ends its waits); the
// first collective of a new epoch re-keys the tags and closes the endpoints
// to nodes no longer in the job. And, at the job's end, the goodbye that
// lets the last bytes leave.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "daemon/peer/job_membership.h"
#include "daemon/peer/node_endpoints.h"
#include "daemon/peer/node_side.h"
#include "daemon/peer/ucx_mesh.h"

namespace gradsync::peer {

class JobEndpoints final : public NodeEndpoints {
 public:
  // `membership` outlives this (a member of the same CrossNode); `side`
  // says this node's side now, for its place in the ring.
  JobEndpoints(std::string job_id, std::string token, std::string self_address, const JobMembership* membership,
               std::function<const NodeSide&()> side);

  // The UCX transport (at start), its address for the other nodes, the
  // end of every transfer now and from now on, the traffic with a node.
  Status open(const transport::UcxOptions& options) { return mesh_.open(options); }
  std::string address() const { return mesh_.address(); }
  void abort(const std::string& reason) { mesh_.abort(reason); }
  transport::PeerStats stats(const std::string& ucx_address) const { return mesh_.stats(ucx_address); }
  // Executor thread, between batches: drives the data plane until one of
  // `wake_fds` is readable or `until` passes (UcxMesh::idle); false at once
  // when it is not open.
  bool idle(const std::vector<int>& wake_fds, CrossClock::time_point until) { return mesh_.idle(wake_fds, until); }

  // At the job's end, after the coordination streams ended and before the
  // endpoints close, exchange a byte with every other daemon over the data
  // plane (or wait a second): the last bytes of a collective this daemon
  // finished may still be on their way to one that has not, and closing
  // first could lose them. Asked for by jobs that run the rounds
  // (fast_rounds.h); sayGoodbye skips it once a node was lost.
  void sayGoodbyeAtTheEnd() { goodbye_.store(true); }
  void sayGoodbye(bool node_lost);

  // NodeEndpoints.
  StatusOr<std::optional<collective::RingContext>> ring(const collective::TransferId& id,
                                                        CrossClock::time_point deadline, uint64_t epoch,
                                                        const std::vector<int>& nodes) override;
  StatusOr<std::optional<collective::MeshContext>> mesh(const collective::TransferId& id,
                                                        CrossClock::time_point deadline, uint64_t epoch,
                                                        const std::vector<int>& nodes) override;
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const override { return membership_->members(epoch); }
  NcclId ncclId() const override { return membership_->ncclId(side_()); }
  Status epochRuns(uint64_t epoch) const override { return membership_->epochRuns(epoch); }
  size_t dropBatchStrays(uint64_t epoch, uint64_t sequence) override { return mesh_.dropBatchStrays(epoch, sequence); }

 private:
  // The members at `nodes` (empty: all) of `epoch`, in order, and this
  // node's place among them (-1: not one of them), once its tags are lifted.
  Status enter(CrossClock::time_point deadline, uint64_t epoch, const std::vector<int>& nodes,
               std::vector<v1::NodeInfo>* members, int* self);

  const std::string job_id_;
  const std::string self_address_;
  const JobMembership* const membership_;
  const std::function<const NodeSide&()> side_;
  UcxMesh mesh_;  // its own lock, taken under the membership's
  std::atomic<bool> goodbye_{false};
};

}  // namespace gradsync::peer
