// SPDX-License-Identifier: Apache-2.0
// The leader's view of a forming multi-node job: which node holds which
// ranks, when every rank is accounted for, and the ring order.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::membership {

class MembershipBuilder {
 public:
  MembershipBuilder(std::string job_id, int size) : job_id_(std::move(job_id)), size_(size), owner_(size, -1) {}

  // Adds one node. INVALID_ARGUMENT for ranks outside [0, size) or unsorted;
  // ALREADY_EXISTS when a rank is already held by another node (naming both).
  Status add(v1::NodeInfo node);
  // True once the nodes' ranks cover every rank of the job.
  bool complete() const { return covered_ == size_; }
  // The nodes in ring order, with cross_rank set: by topology label, then
  // by lowest rank, turned so that the node of rank 0 comes first (a ring
  // has no start: neighbours stay neighbours). Without labels: by lowest
  // rank.
  std::vector<v1::NodeInfo> ordered() const;
  // Ranks no node holds yet.
  std::vector<int> missingRanks() const;

 private:
  std::string job_id_;
  int size_;
  std::vector<int> owner_;  // rank -> index in nodes_
  std::vector<v1::NodeInfo> nodes_;
  int covered_ = 0;
};

}  // namespace gradsync::membership
