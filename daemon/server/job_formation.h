// SPDX-License-Identifier: Apache-2.0
// Whether a job formed, and why not: a job forms once every local rank
// registered here and, across daemons, every node joined the leader (an
// elastic job past its first epoch formed already, whoever is missing);
// one that has not formed within the join timeout fails, naming the local
// ranks that never registered or the nodes that never joined. Also the
// claim of the one thread that starts the job's peer side once every local
// rank is here. Rules only, no lock and no I/O: the Job holds it under its
// own lock and asks it with what it knows. Unit-tested alone.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "daemon/coordinator/negotiator.h"
#include "daemon/coordinator/request.h"

namespace gradsync::server {

using coordinator::Clock;

class JobFormation {
 public:
  struct Options {
    std::string job_id;
    int size = 0;        // the job's ranks
    int local_size = 0;  // this node's
    Clock::duration join_timeout = std::chrono::seconds(30);
    std::string hostname;  // this daemon's, for the messages
  };
  // What the job knows when it asks.
  struct Facts {
    size_t registered = 0;            // local ranks that ever registered here
    bool elastic_past_first = false;  // an elastic job whose epoch moved on
    bool across_daemons = false;
    bool nodes_joined = false;    // across daemons: every node joined (the peer side formed)
    bool joins_a_leader = false;  // a follower: its join to the leader has the same deadline and says why it failed
  };
  enum class Verdict { kFormed, kWaiting, kFailed };

  explicit JobFormation(Options options, Clock::time_point created = Clock::now());

  bool formed() const { return formed_; }
  // Every local rank registered here at some point (the job formed, or
  // `registered` of them did).
  bool localComplete(size_t registered) const { return formed_ || static_cast<int>(registered) >= options_.local_size; }
  // True once, for the caller that should start the peer side: `live`
  // sessions hold every local rank (the last two may register at once).
  bool claimStart(int live);
  // The verdict at `now` (kFormed is recorded: asked again, formed); on
  // kFailed, `cause` says why, naming the local ranks that never
  // registered (`never_registered`: by their rank in the job on one node,
  // `by_rank`, else by their local rank) or the ranks whose nodes never
  // joined the leader (`missing`), asked for then only.
  using Ranks = std::function<std::vector<int>(bool by_rank)>;
  Verdict check(const Facts& facts, Clock::time_point now, const Ranks& never_registered, const Ranks& missing,
                std::string* cause);

 private:
  const Options options_;
  const Clock::time_point created_;
  bool formed_ = false;         // every local rank registered, every node joined
  bool start_claimed_ = false;  // the peer side is started by the thread that claimed it
};

}  // namespace gradsync::server
