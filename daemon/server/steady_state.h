// SPDX-License-Identifier: Apache-2.0
// The local half of the cached steady state across daemons (see
// daemon/peer/fast_rounds.h): requests of this node's ranks that repeat a
// cached collective, held until the rounds among the daemons agree to run
// it, or until they have waited too long and go to the leader instead. Pure
// state; the Job guards it with its mutex.
//
// The members of a grouped allreduce run whole or not at all: a group is
// ready here only once every member is (a daemon offers all its member ids
// in one round or none), a round runs it only if the ids every daemon
// offered make the whole group (`runnable`), and a member held too long
// goes to the leader with every other held member of its group.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/coordinator/request.h"

namespace gradsync::server {

class Session;

class SteadyState {
 public:
  using Clock = std::chrono::steady_clock;
  struct Held {
    std::shared_ptr<Session> session;
    coordinator::Request request;
    Clock::time_point since;
  };

  // Whether `id` is known (its response and this node's ranks in it).
  bool knows(uint64_t id) const { return entries_.count(id) > 0; }
  // Learns cached collective `id`: `response` as the leader negotiated it,
  // `local` this node's ranks in it (empty: never held here).
  void learn(uint64_t id, coordinator::Response response, std::set<int> local);
  // Whether a request of local `rank` for `id` may be held here (the entry
  // is known and the rank is one of its local ranks).
  bool canHold(uint64_t id, int rank) const;
  // Holds a request for `id` (canHold said so); true when that made `id`
  // ready here (with the rest of its group, if it has one).
  bool hold(uint64_t id, Held held);
  // Whether `rank` holds a request named `name`.
  bool holds(int rank, const std::string& name) const;
  // Whether every local rank of `id` holds a request for it.
  bool isReady(uint64_t id) const;
  // The ids every local rank of which holds a request, increasing; a
  // group's members only when all of them are.
  std::vector<uint64_t> ready() const;
  // Of the ids every daemon offered in a round (`agreed`, increasing), the
  // ones to run: a group's members only if all of them are there (else a
  // daemon's ranks asked for another version of a member; they stay held
  // and go to the leader, which names the difference).
  std::vector<uint64_t> runnable(const std::vector<uint64_t>& agreed) const;
  // The response of ready `id` with each local rank's oldest request in
  // place of the leader's copy (released from here).
  coordinator::Response take(uint64_t id);
  // Requests held since before `cutoff`, and every request held for the
  // groups of those (released from here).
  std::vector<Held> takeOlderThan(Clock::time_point cutoff);
  // Every request held for the members of group `group_id` (released from
  // here: one of its members went to the leader, which negotiates a group
  // whole).
  std::vector<Held> takeGroup(uint64_t group_id);
  std::vector<Held> takeAll();
  // When the oldest request held arrived.
  std::optional<Clock::time_point> oldest() const;
  bool empty() const { return held_count_ == 0; }

 private:
  struct Entry {
    coordinator::Response response;
    std::map<int, size_t> local;           // this node's ranks: their index in the response
    std::map<int, std::deque<Held>> held;  // by rank
    uint64_t group_id = 0;                 // 0: not grouped
    uint32_t group_size = 0;
  };
  bool groupReady(uint64_t group_id, uint32_t group_size) const;
  // Drops `request` (held for `id`) from held_names_.
  void forget(uint64_t id, const coordinator::Request& request);
  // Moves the requests of `id` held since before `cutoff` to `out`.
  void release(uint64_t id, Entry& entry, Clock::time_point cutoff, std::vector<Held>* out);

  std::map<uint64_t, Entry> entries_;
  std::map<uint64_t, std::set<uint64_t>> groups_;                    // group id -> the ids of its members' versions
  std::multimap<std::pair<int, std::string>, uint64_t> held_names_;  // (rank, name) -> id, one per request held
  size_t held_count_ = 0;
};

}  // namespace gradsync::server
