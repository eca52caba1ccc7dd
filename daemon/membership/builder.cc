// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/builder.h"

#include <algorithm>

namespace gradsync::membership {

Status MembershipBuilder::add(v1::NodeInfo node) {
  const std::string prefix = "job '" + job_id_ + "': node " + node.peer_address() + ": ";
  if (node.ranks().empty()) return invalidArgument(prefix + "holds no ranks");
  for (int i = 0; i < node.ranks_size(); ++i) {
    const int rank = node.ranks(i);
    if (rank < 0 || rank >= size_ || (i > 0 && rank <= node.ranks(i - 1))) {
      return invalidArgument(prefix + "ranks must be increasing and in [0, " + std::to_string(size_) + ")");
    }
    if (owner_[rank] >= 0) {
      return alreadyExists(prefix + "rank " + std::to_string(rank) + " is already held by node " +
                           nodes_[owner_[rank]].peer_address());
    }
  }
  for (int rank : node.ranks()) owner_[rank] = static_cast<int>(nodes_.size());
  covered_ += node.ranks_size();
  nodes_.push_back(std::move(node));
  return okStatus();
}

std::vector<v1::NodeInfo> MembershipBuilder::ordered() const {
  std::vector<v1::NodeInfo> out = nodes_;
  std::sort(out.begin(), out.end(), [](const v1::NodeInfo& a, const v1::NodeInfo& b) {
    if (a.topology() != b.topology()) return a.topology() < b.topology();
    return a.ranks(0) < b.ranks(0);
  });
  const auto first = std::find_if(out.begin(), out.end(), [](const v1::NodeInfo& n) { return n.ranks(0) == 0; });
  if (first != out.end()) std::rotate(out.begin(), first, out.end());
  for (size_t i = 0; i < out.size(); ++i) out[i].set_cross_rank(static_cast<int>(i));
  return out;
}

std::vector<int> MembershipBuilder::missingRanks() const {
  std::vector<int> missing;
  for (int rank = 0; rank < size_; ++rank) {
    if (owner_[rank] < 0) missing.push_back(rank);
  }
  return missing;
}

}  // namespace gradsync::membership
