// SPDX-License-Identifier: Apache-2.0
// The request table of one job: matches ranks' requests by name and decides
// when a collective is ready.
//
// The protocol, for one job on one node:
//  1. A rank's Enqueue becomes a Request (checked against its arena) and is
//     submitted here. A second request with a name this rank already has in
//     flight is rejected at once (ALREADY_EXISTS); the job goes on.
//  2. A collective is ready when every member of its process set has
//     submitted it, or has joined (ranks that ran out of data).
//  3. A ready collective is checked for agreement (agreement.h). Disagreement
//     yields a Response carrying the error, which fails it on every rank.
//  4. Members of a group (grouped allreduce) are held until the whole group is
//     ready, then released together, in submission order.
//  5. JOIN completes when every rank of the job has joined; joined flags then
//     reset, as in Horovod.
//  6. The caller (Job) hands ready responses to the executor in the order
//     returned; the order is the same on every rank.
//  7. PROCESS_SET_ADD / PROCESS_SET_REMOVE change the process sets when they
//     are ready and agreed: ADD numbers the new set (ids are never reused);
//     REMOVE fails the set's collectives still being negotiated, naming the
//     removal, and later requests for it fail as an unknown set.
//  8. Requests with a call number (Request::call) come from ranks that make
//     their calls in one order: a request whose call number a pending
//     collective of another name holds, or whose name a pending collective
//     holds under another call number, fails at once together with that
//     collective, naming both (the ranks made different calls).
// Not thread-safe: the Job serialises access.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/coordinator/process_set_table.h"
#include "daemon/coordinator/request.h"

namespace gradsync::coordinator {

using Clock = std::chrono::steady_clock;

// A collective that some ranks submitted and others have not.
struct Stall {
  std::string name;
  std::vector<int> submitted_ranks;
  std::vector<int> missing_ranks;
  Clock::duration age;
};

class Negotiator {
 public:
  // `process_sets[i]` holds the ranks of process set id i + 1 (increasing,
  // already validated); id 0 is every rank of the job.
  Negotiator(std::string job_id, int size, std::vector<std::vector<int>> process_sets);

  // Adds one request; returns the responses that became ready (possibly
  // none, possibly several when a group completes). A request that cannot
  // take part at all (unknown process set, rank outside it, name in flight)
  // is rejected with its own error and changes nothing else.
  StatusOr<std::vector<Response>> submit(Request request, Clock::time_point now);
  // Adds the requests of `repeat`'s ranks, as `submit` each would: where
  // each fills an empty slot of the collective with nothing to check (no
  // other call number or cached response), as marks, without a copy of a
  // request (a follower's ranks repeating a cached collective, each step).
  struct Repeated {
    std::vector<Response> ready;
    std::vector<std::pair<Request, Status>> refused;  // each rank's own error
  };
  Repeated submit(const Repeat& repeat, Clock::time_point now);

  // Collectives waiting for longer than `threshold`, oldest first.
  std::vector<Stall> stalls(Clock::time_point now, Clock::duration threshold) const;

  // Removes the named pending collective and returns its requests (used when
  // its stall deadline passes).
  std::vector<Request> take(const std::string& name);
  // Removes every pending request (used when the job fails).
  std::vector<Request> takeAll();

  size_t pendingCount() const { return table_.size(); }
  bool joined(int rank) const { return joined_.count(rank) > 0; }
  const ProcessSetTable& processSets() const { return sets_; }
  // A follower applies the process set change its leader negotiated
  // (`response`: a PROCESS_SET_ADD or _REMOVE that succeeded there).
  Status applyLeaderChange(const Response& response);

 private:
  struct Entry {
    int process_set_id = 0;
    // What each member of the process set submitted, in its (increasing)
    // rank order: a thousand nodes' ranks each mark their own with no
    // lookup and no copy of a request.
    enum class Slot : uint8_t { kEmpty, kGiven, kRepeated };
    std::vector<Slot> slots;
    // The requests given in full: few (this node's own ranks, each step)
    // with their slots, in arrival order; past kDenseAfter of them (every
    // rank's, a first step), one slot each in `dense` instead.
    std::vector<std::pair<size_t, Request>> given;
    std::vector<std::optional<Request>> dense;  // empty, or one per member
    static constexpr size_t kDenseAfter = 64;
    // What the kRepeated slots repeat: their requests in this cached
    // response, at the same index.
    std::shared_ptr<const Response> repeated;
    uint64_t repeated_id = 0;
    size_t submitted = 0;  // slots filled
    // Requests of ranks outside the set (only after the ranks disagreed on
    // the set, which fails the entry).
    std::vector<Request> outside;
    Clock::time_point first_seen;
    uint64_t sequence = 0;  // submission order of the first request
    uint64_t call = 0;      // the first request's call number (0: none)

    // The request in `slot` (filled) in full.
    Request at(size_t slot) const;
    // The lowest rank's request (there is one).
    Request lowest() const;
    // Every request, in increasing rank order (the entry is emptied).
    std::vector<Request> takeInRankOrder();
  };
  using Table = std::unordered_map<std::string, Entry>;

  // A new entry for `process_set_id` (a known set).
  Entry newEntry(int process_set_id, Clock::time_point now) const;
  // The same, next in submission order, put in the table (and `call`, if
  // any, in calls_) under `name`.
  Table::iterator addEntry(const std::string& name, int process_set_id, uint64_t call, Clock::time_point now);
  // `rank`'s slot in `entry` (its index among the set's members), if a member.
  std::optional<size_t> slotOf(const Entry& entry, int rank) const;
  // Whether `entry` holds a request of `rank`.
  bool has(const Entry& entry, int rank) const;
  // Puts `request` into its slot of `entry`, or among its outsiders.
  void place(Entry* entry, Request request) const;
  // The slots `repeat` would mark as they are in `entry` (its pending
  // collective; null: none yet), or nullopt where it needs the checks of
  // `submit` for each rank.
  std::optional<std::vector<size_t>> markable(const Repeat& repeat, const Entry* entry) const;

  Status checkMembership(const Request& request) const;
  // Point 8: the failed responses when `request` contradicts pending
  // collectives (it is then part of them); empty when it does not.
  std::vector<Response> failDifferentCalls(const Request& request);
  // Removes the entry from the table (and from calls_), returning it.
  Entry extract(Table::iterator it);
  bool isReady(const Entry& entry) const;
  Response makeResponse(const std::string& name, Entry entry) const;
  // Moves every ready entry out of the table into `out`, in first-seen
  // order (after a join; a submit readies at most its own entry).
  void collectReady(std::vector<Response>* out);
  // Moves the `ready` entries (sequence, name) out into `out`, in order.
  void release(std::vector<std::pair<uint64_t, std::string>> ready, std::vector<Response>* out);
  void releaseGroups(std::vector<Response> ready, std::vector<Response>* out);
  StatusOr<std::vector<Response>> submitJoin(Request request, Clock::time_point now);
  // Applies an agreed PROCESS_SET_ADD / _REMOVE (failing it when the table
  // refuses); a removal appends the failures of the set's pending work.
  void changeProcessSets(Response* response, std::vector<Response>* failed);
  const std::vector<int>& membersOf(int process_set_id) const { return *sets_.find(process_set_id); }

  std::string job_id_;
  ProcessSetTable sets_;
  Table table_;
  std::map<std::pair<int, uint64_t>, std::string> calls_;  // (set, call number) -> pending name
  std::set<int> joined_;
  std::vector<Request> join_requests_;
  int last_joined_rank_ = -1;
  std::map<uint64_t, std::vector<Response>> groups_;  // group id -> ready members
  uint64_t next_sequence_ = 0;
};

}  // namespace gradsync::coordinator
