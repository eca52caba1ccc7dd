// SPDX-License-Identifier: Apache-2.0
// The swarm's election (leader failover at scale): once the job formed, the
// leader's daemon is killed (SIGKILL) and every simulated follower votes
// over Elect for one real follower daemon, the candidate (cross rank 1, run
// with --leader-failover quorum), all at once as the swarm's calls on
// gRPC's callback API. The candidate holds the votes until it notices the
// loss itself, takes over with the majority, and answers them all. Prints
// one line of figures: the time to the new leader, to the last answer, the
// candidate's threads and CPU.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tools/swarm/swarm_follower.h"

namespace gradsync::swarm {

struct ElectionSetup {
  std::string candidate;  // its peer address
  int candidate_pid = 0;
  int leader_pid = 0;
  uint64_t epoch = 0;  // the epoch the leader is lost in
  int daemons = 0;     // the job's, the leader's and the candidate's counted
  std::chrono::seconds timeout{60};
};

// Kills the leader and runs the election; 0 when a majority elected the
// candidate, 1 otherwise (why on stderr).
int electAfterLeaderLoss(const ElectionSetup& setup, const SwarmJob& job,
                         const std::vector<std::unique_ptr<SwarmFollower>>& voters);

}  // namespace gradsync::swarm
