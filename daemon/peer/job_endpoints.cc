// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/job_endpoints.h"

#include "daemon/common/logging.h"

namespace gradsync::peer {
namespace {

// The members at `nodes` (empty: all), in order, and this node's place among
// them (-1: not one of them). Positions outside the membership are dropped.
void selectNodes(const std::vector<int>& nodes, std::vector<v1::NodeInfo>* members, int* self) {
  if (nodes.empty()) return;
  std::vector<v1::NodeInfo> selected;
  int place = -1;
  for (int node : nodes) {
    if (node < 0 || node >= static_cast<int>(members->size())) continue;
    if (node == *self) place = static_cast<int>(selected.size());
    selected.push_back((*members)[node]);
  }
  *members = std::move(selected);
  *self = place;
}

}  // namespace

JobEndpoints::JobEndpoints(std::string job_id, std::string token, std::string self_address,
                           const JobMembership* membership, std::function<const NodeSide&()> side)
    : job_id_(job_id),
      self_address_(std::move(self_address)),
      membership_(membership),
      side_(std::move(side)),
      mesh_(std::move(job_id), std::move(token)) {}

void JobEndpoints::sayGoodbye(bool node_lost) {
  if (!goodbye_.load()) return;
  if (node_lost) {  // a node is gone: nobody waits for this one's bytes
    GS_LOG(control, debug, "job '{}': no goodbye (a node was lost)", job_id_);
    return;
  }
  mesh_.goodbye();
}

Status JobEndpoints::enter(CrossClock::time_point deadline, uint64_t epoch, const std::vector<int>& nodes,
                           std::vector<v1::NodeInfo>* members, int* self) {
  bool new_epoch = false;
  {
    MutexLock lock(membership_->mutex());
    if (!membership_->changed().wait_until(
            lock, deadline, [&]() GS_REQUIRES(membership_->mutex()) { return membership_->formedOrEndedLocked(); }) ||
        membership_->stoppingLocked()) {
      return deadlineExceeded("job '" + job_id_ + "': the nodes never formed a ring");
    }
    RETURN_IF_ERROR(membership_->epochRunsLocked(epoch));
    // Checked and lifted under one lock: an interruption for a later epoch
    // comes after this and ends this collective's waits.
    const membership::EpochBook& book = membership_->bookLocked();
    new_epoch = mesh_.enterEpoch(book.epoch());
    *members = book.members();
    *self = -1;
    for (const auto& node : book.members()) {
      if (node.peer_address() == self_address_) *self = node.cross_rank();
    }
  }
  if (*self < 0) return internalError("this daemon is not in its job's membership");
  if (new_epoch) {
    const size_t closed = mesh_.rekey(epoch, *members);
    if (closed > 0 || epoch > 1) {
      GS_LOG(control, info, "job '{}': the ring re-forms for epoch {} ({} nodes)", job_id_, epoch, members->size());
    }
  }
  selectNodes(nodes, members, self);
  return okStatus();
}

StatusOr<std::optional<collective::RingContext>> JobEndpoints::ring(const collective::TransferId& id,
                                                                    CrossClock::time_point deadline, uint64_t epoch,
                                                                    const std::vector<int>& nodes) {
  std::vector<v1::NodeInfo> members;
  int self = -1;
  RETURN_IF_ERROR(enter(deadline, epoch, nodes, &members, &self));
  if (self < 0) return std::optional<collective::RingContext>();
  ASSIGN_OR_RETURN(auto ring, mesh_.ring(id, deadline, members, self));
  GS_LOG(executor, debug,
         "job '{}': ring of batch {} response {} call {} in epoch {}: node {} of {}, after {}, before {}", job_id_,
         id.batch, id.response, id.call, epoch, self, members.size(), ring.left->name(), ring.right->name());
  return std::optional<collective::RingContext>(std::move(ring));
}

StatusOr<std::optional<collective::MeshContext>> JobEndpoints::mesh(const collective::TransferId& id,
                                                                    CrossClock::time_point deadline, uint64_t epoch,
                                                                    const std::vector<int>& nodes) {
  std::vector<v1::NodeInfo> members;
  int self = -1;
  RETURN_IF_ERROR(enter(deadline, epoch, nodes, &members, &self));
  if (self < 0) return std::optional<collective::MeshContext>();
  ASSIGN_OR_RETURN(auto mesh, mesh_.mesh(id, deadline, members, self));
  return std::optional<collective::MeshContext>(std::move(mesh));
}

}  // namespace gradsync::peer
