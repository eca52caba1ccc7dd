// SPDX-License-Identifier: Apache-2.0
// What the coordinator negotiates: one rank's request for a collective, and
// the response every rank of the process set executes once all agree.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace gradsync::coordinator {

// A CUDA tensor: `length` bytes at `offset` of an allocation the rank's
// client exported once (see control.proto CudaTensorRef).
struct CudaRef {
  uint64_t buffer_id = 0;
  uint64_t offset = 0;
  uint32_t event_slot = 0;
};

// One rank's request, already checked on its own (sizes match the shape, the
// range lies inside the rank's arena or its exported CUDA allocation).
struct Request {
  int rank = -1;
  uint64_t handle = 0;
  std::string name;
  CollectiveType type = v1::COLLECTIVE_TYPE_UNSPECIFIED;
  DataType dtype = v1::DATA_TYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  ReduceOp op = v1::REDUCE_OP_UNSPECIFIED;
  double prescale = 1.0;
  double postscale = 1.0;
  int root_rank = 0;
  int process_set_id = 0;
  std::vector<int64_t> splits;  // ALLTOALL, one per member of the process set
  uint64_t offset = 0;          // input (and in-place output) bytes in the arena
  uint64_t length = 0;
  uint64_t group_id = 0;  // grouped allreduce; 0: not grouped
  uint32_t group_size = 0;
  std::optional<CudaRef> cuda;  // set: device memory, `offset` unused
  // CUDA collectives with an output of their own (allgather, alltoall,
  // reducescatter): where it goes and its size, given by the caller.
  std::optional<CudaRef> cuda_output;
  uint64_t output_length = 0;
  // Non-empty: the rank failed this collective at the call, for this reason
  // (it carries no data; the negotiated response fails on every rank).
  std::string abandoned;
  // PROCESS_SET_ADD: the new set's ranks; PROCESS_SET_REMOVE: the set's id.
  std::vector<int> set_ranks;
  int target_set = 0;
  bool commit = false;  // BARRIER: an elastic job's commit point (joiners admitted)
  // Non-zero: the rank's call number on its process set (control.proto
  // Enqueue.call); not part of the collective's metadata.
  uint64_t call = 0;
  // Non-zero: the id of the leader's cached response whose request of this
  // rank this one repeats in every field but handle, offset and call (set
  // by the leader from its response cache, never taken from the wire). A
  // collective whose requests all repeat one cached response needs no
  // second check: it passed them with the same metadata.
  uint64_t repeats = 0;
  // When this daemon took the request from its rank (for latency metrics;
  // unset for requests of other daemons' ranks).
  std::chrono::steady_clock::time_point received{};

  bool onCuda() const { return cuda.has_value(); }
};

// The requests of a response, one per rank, copied in O(1): copies share
// the list, and an entry changed in a copy (a node's own ranks' requests in
// a cached response, each step) is kept beside it. A cached collective of W
// ranks then costs a daemon O(its own ranks) per step to set up, not O(W)
// request copies. Reads never copy; appending makes the list its own.
class RequestList {
 public:
  using Entry = std::optional<Request>;

  RequestList() = default;
  RequestList(std::initializer_list<Entry> entries) : base_(std::make_shared<std::vector<Entry>>(entries)) {}
  // Takes `entries` as they are (no copy).
  explicit RequestList(std::vector<Entry> entries) : base_(std::make_shared<std::vector<Entry>>(std::move(entries))) {}

  size_t size() const { return base_ ? base_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Entry& operator[](size_t i) const {
    if (!changed_.empty() && i >= changed_.front().first && i <= changed_.back().first) {
      if (const Entry* entry = changedAt(i)) return *entry;
    }
    return (*base_)[i];
  }
  // Entry `i`, to change it in place (copied beside the shared list first).
  Entry& mutableAt(size_t i);
  void set(size_t i, Entry entry) { mutableAt(i) = std::move(entry); }
  // Every entry, to change them all (the list made its own first).
  std::vector<Entry>& mutableAll() { return own(); }

  // Building a list: each makes the list its own first (copies a shared one).
  void resize(size_t n) { own().resize(n); }
  void reserve(size_t n) { own().reserve(n); }
  void push_back(Entry entry) { own().push_back(std::move(entry)); }
  template <typename... Args>
  void emplace_back(Args&&... args) {
    own().emplace_back(std::forward<Args>(args)...);
  }

  // Reads every entry in order, changes included.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = const Entry*;
    using reference = const Entry&;
    const_iterator(const RequestList* list, size_t i) : list_(list), i_(i) {}
    reference operator*() const { return (*list_)[i_]; }
    pointer operator->() const { return &(*list_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++i_;
      return before;
    }
    bool operator==(const const_iterator& other) const { return i_ == other.i_; }
    bool operator!=(const const_iterator& other) const { return i_ != other.i_; }

   private:
    const RequestList* list_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

 private:
  const Entry* changedAt(size_t i) const;
  std::vector<Entry>& own();

  std::shared_ptr<std::vector<Entry>> base_;
  // Entries changed in this copy, by index, increasing (few: a node's ranks).
  std::vector<std::pair<size_t, Entry>> changed_;
};

// A negotiated collective. `requests[i]` belongs to `ranks[i]`; it is empty
// for a rank that has joined (it contributes nothing, receives nothing).
struct Response {
  std::string name;
  CollectiveType type = v1::COLLECTIVE_TYPE_UNSPECIFIED;
  int process_set_id = 0;
  std::vector<int> ranks;
  RequestList requests;
  // Non-OK: every present request fails with this status.
  Status status;
  // JOIN: the rank that joined last.
  int last_joined_rank = -1;
  // PROCESS_SET_ADD / PROCESS_SET_REMOVE that succeeded: the set added (its
  // new id) or removed.
  int changed_process_set = 0;
  // Elastic jobs across daemons: this commit barrier admits the waiting
  // joiners (decided by the leader before it sends the batch).
  bool admits_joiners = false;
  // Non-zero: the leader built it from this cached response, which every
  // rank (each present) repeats; its shared requests keep the cached
  // handles, offsets and calls of other nodes' ranks (only used there).
  uint64_t repeats = 0;

  // The first present request (there is always one).
  const Request& first() const;
  // Number of ranks taking part with data.
  int activeCount() const;
  // The cached response every request repeats (`repeats`, or
  // Request::repeats of every rank, each present), or 0.
  uint64_t repeatedId() const;
  // The index of `rank` in `ranks` (increasing in a process set's
  // response; the whole job's set needs no search), if there.
  std::optional<size_t> indexOf(int rank) const;
};

// Requests of several ranks, each repeating its own request in one cached
// response but for handle, offset and call (a follower's ranks, by cache
// id, at the leader): negotiated without a copy of the request per rank.
struct Repeat {
  std::shared_ptr<const Response> cached;  // holds a request of every rank below
  uint64_t id = 0;                         // its cache id
  std::vector<int> ranks;
  uint64_t call = 0;  // every rank's (Request::call)

  // `ranks[i]`'s request in full (repeatedRequest).
  Request request(size_t i) const;
};

// The request at `index` of cached response `cached` (id `id`) as its rank
// repeats it with call number `call` (handle and offset 0: they are known
// only where the rank runs).
Request repeatedRequest(const Response& cached, size_t index, uint64_t id, uint64_t call);

// "[0, 2, 5]", for error messages.
std::string ranksString(const std::vector<int>& ranks);

}  // namespace gradsync::coordinator
