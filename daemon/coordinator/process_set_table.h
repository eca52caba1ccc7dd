// SPDX-License-Identifier: Apache-2.0
// The process sets of one job: id 0 is every rank; static sets get ids
// 1..n at registration; sets added at run time get the next ids. Ids are
// never reused within a job, so a stale id held by a rank names no set
// instead of another one.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace gradsync::coordinator {

class ProcessSetTable {
 public:
  // `static_sets[i]` holds the ranks of set i + 1 (increasing, validated).
  ProcessSetTable(int size, std::vector<std::vector<int>> static_sets);

  // The set's ranks, increasing; null when there is no such set.
  const std::vector<int>* find(int id) const;
  bool contains(int id) const { return find(id) != nullptr; }
  // Adds a set with the next id. ALREADY_EXISTS when a set with the same
  // ranks exists (as Horovod, which refuses duplicate sets);
  // INVALID_ARGUMENT when the ranks are not increasing in [0, size).
  StatusOr<int> add(const std::vector<int>& ranks);
  // Adds the set the job's leader numbered `id` (a follower's copy).
  Status insert(int id, const std::vector<int>& ranks);
  // NOT_FOUND for an unknown id, INVALID_ARGUMENT for 0.
  Status remove(int id);
  // Number of sets, the global one included.
  size_t count() const { return sets_.size(); }
  // Every set by id, the global one (0) first.
  const std::map<int, std::vector<int>>& all() const { return sets_; }
  // "process set 3 [0, 2]", for messages.
  static std::string describe(int id, const std::vector<int>& ranks);
  // INVALID_ARGUMENT unless `ranks` is non-empty, strictly increasing, in [0, size).
  Status checkRanks(const std::vector<int>& ranks) const;

 private:
  int size_;
  std::map<int, std::vector<int>> sets_;
  int next_id_;
};

}  // namespace gradsync::coordinator
