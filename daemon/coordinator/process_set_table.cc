// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/process_set_table.h"

#include "daemon/coordinator/request.h"

namespace gradsync::coordinator {

ProcessSetTable::ProcessSetTable(int size, std::vector<std::vector<int>> static_sets) : size_(size) {
  std::vector<int> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  sets_.emplace(0, std::move(all));
  int id = 1;
  for (auto& set : static_sets) sets_.emplace(id++, std::move(set));
  next_id_ = id;
}

const std::vector<int>* ProcessSetTable::find(int id) const {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

Status ProcessSetTable::checkRanks(const std::vector<int>& ranks) const {
  if (ranks.empty()) return invalidArgument("a process set needs at least one rank");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_) {
      return invalidArgument("process set rank " + std::to_string(ranks[i]) + " outside [0, " + std::to_string(size_) +
                             ")");
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      return invalidArgument("process set ranks " + ranksString(ranks) + " are not strictly increasing");
    }
  }
  return okStatus();
}

StatusOr<int> ProcessSetTable::add(const std::vector<int>& ranks) {
  RETURN_IF_ERROR(checkRanks(ranks));
  for (const auto& [id, members] : sets_) {
    if (members == ranks)
      return alreadyExists("a process set with ranks " + ranksString(ranks) + " exists already: id " +
                           std::to_string(id));
  }
  const int id = next_id_++;
  sets_.emplace(id, ranks);
  return id;
}

Status ProcessSetTable::insert(int id, const std::vector<int>& ranks) {
  RETURN_IF_ERROR(checkRanks(ranks));
  if (id <= 0 || sets_.count(id)) return invalidArgument("process set id " + std::to_string(id) + " is taken");
  sets_.emplace(id, ranks);
  if (id >= next_id_) next_id_ = id + 1;
  return okStatus();
}

Status ProcessSetTable::remove(int id) {
  if (id == 0) return invalidArgument("the global process set (id 0) cannot be removed");
  if (sets_.erase(id) == 0) return notFound("there is no process set " + std::to_string(id));
  return okStatus();
}

std::string ProcessSetTable::describe(int id, const std::vector<int>& ranks) {
  return "process set " + std::to_string(id) + " " + ranksString(ranks);
}

}  // namespace gradsync::coordinator
