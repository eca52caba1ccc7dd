// SPDX-License-Identifier: Apache-2.0
// Client: adding and removing process sets at run time (collectives of the
// whole job, negotiated like any other; the daemon numbers the sets).
#include <algorithm>

#include "base/dtype.h"
#include "client/src/client.h"

namespace gradsync::client {
namespace {

std::string ranksText(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

StatusOr<int> Client::changeProcessSets(OpSpec spec, const Status& invalid, double timeout_seconds) {
  {
    MutexLock lock(mutex_);
    // Every rank changes its sets in the same order: the names pair up.
    spec.name = "process_set.change." + std::to_string(next_set_change_++);
  }
  auto handle = invalid.isOk() ? enqueue(spec) : abandon(spec, invalid.message());
  if (!handle.isOk()) return handle.status();
  int id = 0;
  Status finished = finishBlocking(*handle, timeout_seconds, "process set change '" + spec.name + "'",
                                   [&](const Operation& op) { id = op.process_set_id; });
  if (!invalid.isOk()) return invalid;
  if (!finished.isOk()) return finished;
  return id;
}

StatusOr<int> Client::addProcessSet(std::vector<int> ranks, double timeout_seconds) {
  std::sort(ranks.begin(), ranks.end());
  Status invalid = okStatus();
  if (ranks.empty()) invalid = invalidArgument("a process set needs at least one rank");
  for (size_t i = 0; invalid.isOk() && i < ranks.size(); ++i) {
    const int size = membership().size;
    if (ranks[i] < 0 || ranks[i] >= size) {
      invalid = invalidArgument("process set rank " + std::to_string(ranks[i]) + " outside [0, " +
                                std::to_string(size) + ")");
    } else if (i > 0 && ranks[i] == ranks[i - 1]) {
      invalid = invalidArgument("process set rank " + std::to_string(ranks[i]) + " given twice");
    }
  }
  {
    MutexLock lock(mutex_);
    for (const auto& [id, members] : process_sets_) {
      if (invalid.isOk() && members == ranks) {
        invalid =
            alreadyExists("a process set with ranks " + ranksText(ranks) + " exists already: id " + std::to_string(id));
      }
    }
  }
  OpSpec spec;
  spec.type = v1::PROCESS_SET_ADD;
  spec.set_ranks = ranks;
  ASSIGN_OR_RETURN(int id, changeProcessSets(std::move(spec), invalid, timeout_seconds));
  MutexLock lock(mutex_);
  process_sets_[id] = std::move(ranks);
  return id;
}

Status Client::removeProcessSet(int id, double timeout_seconds) {
  Status invalid = okStatus();
  if (id == 0) invalid = invalidArgument("the global process set (id 0) cannot be removed");
  {
    MutexLock lock(mutex_);
    if (invalid.isOk() && !process_sets_.count(id)) invalid = notFound("there is no process set " + std::to_string(id));
  }
  OpSpec spec;
  spec.type = v1::PROCESS_SET_REMOVE;
  spec.target_set = id;
  RETURN_IF_ERROR(changeProcessSets(std::move(spec), invalid, timeout_seconds).status());
  MutexLock lock(mutex_);
  process_sets_.erase(id);
  return okStatus();
}

StatusOr<std::vector<int>> Client::processSetRanks(int id) {
  MutexLock lock(mutex_);
  auto it = process_sets_.find(id);
  if (it == process_sets_.end()) return notFound("there is no process set " + std::to_string(id));
  return it->second;
}

}  // namespace gradsync::client
