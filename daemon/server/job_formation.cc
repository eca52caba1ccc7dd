// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_formation.h"

namespace gradsync::server {

JobFormation::JobFormation(Options options, Clock::time_point created)
    : options_(std::move(options)), created_(created) {}

bool JobFormation::claimStart(int live) {
  if (start_claimed_ || live < options_.local_size) return false;
  start_claimed_ = true;
  return true;
}

JobFormation::Verdict JobFormation::check(const Facts& facts, Clock::time_point now, const Ranks& never_registered,
                                          const Ranks& missing, std::string* cause) {
  if (formed_) return Verdict::kFormed;
  // An elastic job on one node that lost a rank before the others all
  // registered went on with those it had (a latecomer must join). Across
  // nodes, a job past its first epoch formed (no epoch changes before),
  // even if a rank was lost before this check saw them all.
  const bool nodes_in = !facts.across_daemons || facts.nodes_joined;
  const bool local_complete = static_cast<int>(facts.registered) >= options_.local_size;
  if ((facts.elastic_past_first || local_complete) && nodes_in) {
    formed_ = true;
    return Verdict::kFormed;
  }
  // A follower's join has the same deadline and says why it failed.
  if (now - created_ < options_.join_timeout || (local_complete && facts.joins_a_leader)) return Verdict::kWaiting;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(options_.join_timeout).count();
  *cause = "job '" + options_.job_id + "' did not form within " + std::to_string(seconds) + " s: ";
  if (!local_complete) {
    // Which ranks were meant for this node is known only as local ranks
    // on a multi-node job; on one node they are the job's ranks.
    const bool single = options_.local_size == options_.size;
    *cause += std::string(single ? "ranks " : "local ranks ") + coordinator::ranksString(never_registered(single)) +
              " never registered with gradsyncd on host " + options_.hostname + " (" +
              std::to_string(facts.registered) + " of " + std::to_string(options_.local_size) + " did)";
  } else {
    *cause += "the nodes of ranks " + coordinator::ranksString(missing(true)) + " never joined the leader on host " +
              options_.hostname;
  }
  return Verdict::kFailed;
}

}  // namespace gradsync::server
