// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/stall_watch.h"

#include <algorithm>

namespace gradsync::server {

StallWatch::StallWatch(std::string job_id, coordinator::Clock::duration deadline)
    : job_id_(std::move(job_id)), deadline_(deadline) {}

StallWatch::Review StallWatch::review(const std::vector<coordinator::Stall>& stalls,
                                      const std::function<std::string(int rank)>& local) {
  Review review;
  std::set<std::string> still_stalled;
  for (const auto& stall : stalls) {
    std::string what = describe(stall, local);
    if (deadline_.count() > 0 && stall.age >= deadline_) {
      review.expired.emplace_back(stall.name, std::move(what));
      continue;
    }
    still_stalled.insert(stall.name);
    if (warned_.insert(stall.name).second) {
      ++warnings_;
      review.warnings.push_back(std::move(what));
    }
  }
  warned_.swap(still_stalled);
  return review;
}

std::string StallWatch::describe(const coordinator::Stall& stall,
                                 const std::function<std::string(int rank)>& local) const {
  const auto elsewhere = [&](int rank) {
    for (const auto& node : nodes_) {
      if (std::find(node.ranks().begin(), node.ranks().end(), rank) != node.ranks().end()) {
        return "rank " + std::to_string(rank) + " (on node " + node.peer_address() + ", host " + node.hostname() + ")";
      }
    }
    return "rank " + std::to_string(rank) + " (not connected)";
  };
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(stall.age).count();
  std::string missing;
  for (int rank : stall.missing_ranks) {
    std::string here = local(rank);
    missing += (missing.empty() ? "" : ", ") + (here.empty() ? elsewhere(rank) : here);
  }
  return "job '" + job_id_ + "': collective '" + stall.name + "' has waited " + std::to_string(seconds) +
         " s for ranks " + coordinator::ranksString(stall.missing_ranks) + " [" + missing + "]; ranks " +
         coordinator::ranksString(stall.submitted_ranks) + " submitted it";
}

}  // namespace gradsync::server
