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
  // Once per review: O(the ranks that submitted the stalls).
  std::unordered_map<int, const coordinator::Stall*> waits_in;
  if (stalls.size() > 1) {
    for (const auto& stall : stalls) {
      for (int rank : stall.submitted_ranks) {
        const coordinator::Stall*& oldest = waits_in[rank];
        if (oldest == nullptr || stall.age > oldest->age) oldest = &stall;
      }
    }
  }
  for (const auto& stall : stalls) {
    std::string what = describe(stall, waits_in, local);
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
                                 const std::unordered_map<int, const coordinator::Stall*>& waits_in,
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
  // A missing rank that waits itself, in the oldest stall it submitted (a
  // few such ranks, one level: the message stays short). It is missing
  // here, so that stall is another one.
  constexpr int kWaitersNamed = 3;
  std::string waiting;
  int named = 0;
  for (int rank : stall.missing_ranks) {
    const auto in = waits_in.find(rank);
    if (in == waits_in.end()) continue;
    waiting += "; rank " + std::to_string(rank) + " itself waits in '" + in->second->name + "' for ranks " +
               coordinator::ranksString(in->second->missing_ranks);
    if (++named == kWaitersNamed) break;
  }
  return "job '" + job_id_ + "': collective '" + stall.name + "' has waited " + std::to_string(seconds) +
         " s for ranks " + coordinator::ranksString(stall.missing_ranks) + " [" + missing + "]; ranks " +
         coordinator::ranksString(stall.submitted_ranks) + " submitted it" + waiting;
}

}  // namespace gradsync::server
