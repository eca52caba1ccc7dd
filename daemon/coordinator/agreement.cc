// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/agreement.h"

#include <functional>
#include <map>
#include <sstream>

namespace gradsync::coordinator {
namespace {

using Describe = std::function<std::string(const Request&)>;

// Groups the present requests by `describe(request)`; when more than one
// distinct value appears, returns a message listing value -> ranks.
std::optional<std::string> differs(const Response& response, const char* what, const Describe& describe) {
  std::map<std::string, std::vector<int>> by_value;
  std::vector<std::string> order;
  for (const auto& r : response.requests) {
    if (!r) continue;
    std::string value = describe(*r);
    if (by_value.find(value) == by_value.end()) order.push_back(value);
    by_value[value].push_back(r->rank);
  }
  if (by_value.size() <= 1) return std::nullopt;
  std::string message = std::string("ranks disagree on ") + what + ": ";
  for (size_t i = 0; i < order.size(); ++i) {
    message += (i ? "; " : "") + order[i] + " on ranks " + ranksString(by_value[order[i]]);
  }
  return message;
}

std::vector<int64_t> tail(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {};
  return std::vector<int64_t>(shape.begin() + 1, shape.end());
}

std::string scales(const Request& r) {
  std::ostringstream s;
  s << "prescale " << r.prescale << " postscale " << r.postscale;
  return s.str();
}

// The checks that apply to a collective type, in the order they are reported.
std::vector<std::pair<const char*, Describe>> checksFor(CollectiveType type) {
  std::vector<std::pair<const char*, Describe>> checks = {
      {"collective", [](const Request& r) { return collectiveName(r.type); }},
      {"dtype", [](const Request& r) { return dataTypeName(r.dtype); }},
      {"device", [](const Request& r) { return std::string(r.onCuda() ? "cuda" : "cpu"); }},
      {"group", [](const Request& r) { return std::to_string(r.group_id) + "/" + std::to_string(r.group_size); }},
  };
  auto shape = [](const Request& r) { return shapeString(r.shape); };
  switch (type) {
    case v1::ALLREDUCE:
    case v1::REDUCESCATTER:
      checks.push_back({"shape", shape});
      checks.push_back({"reduce op", [](const Request& r) { return reduceOpName(r.op); }});
      checks.push_back({"scale factors", scales});
      break;
    case v1::BROADCAST:
      checks.push_back({"shape", shape});
      checks.push_back({"root rank", [](const Request& r) { return std::to_string(r.root_rank); }});
      break;
    case v1::ALLGATHER:
    case v1::ALLTOALL:
      checks.push_back({"rank (number of dimensions)", [](const Request& r) { return std::to_string(r.shape.size()); }});
      checks.push_back({"shape beyond the first dimension",
                        [](const Request& r) { return shapeString(tail(r.shape)); }});
      break;
    case v1::PROCESS_SET_ADD:
      checks.push_back({"the ranks of the process set to add", [](const Request& r) { return ranksString(r.set_ranks); }});
      break;
    case v1::PROCESS_SET_REMOVE:
      checks.push_back({"the process set to remove", [](const Request& r) { return std::to_string(r.target_set); }});
      break;
    default:
      break;
  }
  return checks;
}

// Cross-request rules beyond "all equal".
Status checkCollectiveRules(const std::string& prefix, const Response& response) {
  const Request& first = response.first();
  if (first.type == v1::BROADCAST) {
    bool root_in_set = false;
    for (size_t i = 0; i < response.ranks.size(); ++i) {
      if (response.ranks[i] == first.root_rank) root_in_set = response.requests[i].has_value();
    }
    if (!root_in_set) {
      return failedPrecondition(prefix + "broadcast root rank " + std::to_string(first.root_rank) +
                                " is not an active member of process set " + std::to_string(response.process_set_id) +
                                " " + ranksString(response.ranks));
    }
  }
  if (first.type == v1::ALLTOALL) {
    for (const auto& r : response.requests) {
      if (r && r->splits.size() != response.ranks.size()) {
        return failedPrecondition(prefix + "rank " + std::to_string(r->rank) + " gave " +
                                  std::to_string(r->splits.size()) + " alltoall splits for a process set of " +
                                  std::to_string(response.ranks.size()) + " ranks");
      }
    }
  }
  if (first.type == v1::ALLREDUCE && first.op == v1::ADASUM) {
    const size_t n = response.ranks.size();
    if ((n & (n - 1)) != 0) {
      return failedPrecondition(prefix + "Adasum needs a power-of-two number of ranks, the process set has " +
                                std::to_string(n));
    }
    if (response.activeCount() != static_cast<int>(n)) {
      return failedPrecondition(prefix + "Adasum does not run with joined ranks");
    }
    if (first.onCuda()) return failedPrecondition(prefix + "Adasum on CUDA tensors is not implemented");
  }
  if (first.type != v1::ALLREDUCE && first.type != v1::BARRIER && first.type != v1::JOIN &&
      response.activeCount() != static_cast<int>(response.ranks.size())) {
    std::vector<int> joined;
    for (size_t i = 0; i < response.ranks.size(); ++i) {
      if (!response.requests[i]) joined.push_back(response.ranks[i]);
    }
    return failedPrecondition(prefix + "ranks " + ranksString(joined) + " have joined; only allreduce and barrier " +
                              "run with joined ranks, " + collectiveName(first.type) + " does not");
  }
  return okStatus();
}

}  // namespace

Status checkAgreement(const std::string& job_id, const Response& response) {
  const std::string prefix = "job '" + job_id + "' tensor '" + response.name + "': ";
  // A rank that failed the call itself: the others fail with its reason.
  for (const auto& r : response.requests) {
    if (r && !r->abandoned.empty()) {
      return failedPrecondition(prefix + "rank " + std::to_string(r->rank) + " failed its " +
                                collectiveName(r->type) + " at the call: " + r->abandoned);
    }
  }
  for (const auto& [what, describe] : checksFor(response.first().type)) {
    if (auto message = differs(response, what, describe)) return failedPrecondition(prefix + *message);
  }
  return checkCollectiveRules(prefix, response);
}

}  // namespace gradsync::coordinator
