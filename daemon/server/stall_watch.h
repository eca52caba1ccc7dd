// SPDX-License-Identifier: Apache-2.0
// What one job says about collectives that wait for ranks: a warning once
// per stall (naming the missing ranks, their processes and hosts), and the
// stalls past the deadline, which the job fails. Rules only: the job's
// lock guards it, and the caller takes the stalls from its negotiator.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/coordinator/negotiator.h"
#include "proto/gradsync/v1/peer.pb.h"

namespace gradsync::server {

class StallWatch {
 public:
  // `deadline` zero: never fail.
  StallWatch(std::string job_id, coordinator::Clock::duration deadline);

  // The job's nodes (across daemons), for naming where a missing rank is.
  void setNodes(std::vector<v1::NodeInfo> nodes) { nodes_ = std::move(nodes); }

  struct Review {
    std::vector<std::string> warnings;  // stalls seen for the first time
    // Stalls past the deadline: the collective's name and what to say.
    std::vector<std::pair<std::string, std::string>> expired;
  };
  // Of `stalls` (what the negotiator holds past the warning age): the new
  // warnings and the expired. `local` describes a rank registered here
  // (empty: not here).
  Review review(const std::vector<coordinator::Stall>& stalls, const std::function<std::string(int rank)>& local);
  // Forgets the stalls warned of (a new epoch: they were failed).
  void clear() { warned_.clear(); }
  uint64_t warnings() const { return warnings_; }

 private:
  // `waits_in`: by rank, the oldest stall of the review it submitted, for
  // what a missing rank waits for itself (a rank held up by another names
  // the one that holds it up).
  std::string describe(const coordinator::Stall& stall,
                       const std::unordered_map<int, const coordinator::Stall*>& waits_in,
                       const std::function<std::string(int rank)>& local) const;

  const std::string job_id_;
  const coordinator::Clock::duration deadline_;
  std::vector<v1::NodeInfo> nodes_;
  std::set<std::string> warned_;  // still stalled and warned of
  uint64_t warnings_ = 0;
};

}  // namespace gradsync::server
