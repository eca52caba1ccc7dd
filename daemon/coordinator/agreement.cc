// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/agreement.h"

#include <algorithm>
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
      checks.push_back(
          {"rank (number of dimensions)", [](const Request& r) { return std::to_string(r.shape.size()); }});
      checks.push_back(
          {"shape beyond the first dimension", [](const Request& r) { return shapeString(tail(r.shape)); }});
      break;
    case v1::PROCESS_SET_ADD:
      checks.push_back(
          {"the ranks of the process set to add", [](const Request& r) { return ranksString(r.set_ranks); }});
      break;
    case v1::PROCESS_SET_REMOVE:
      checks.push_back({"the process set to remove", [](const Request& r) { return std::to_string(r.target_set); }});
      break;
    default:
      break;
  }
  return checks;
}

// Whether `a` and `b` agree on every field checksFor(a.type) compares,
// compared directly: the common case costs no strings. False may still be an
// agreement (the descriptions decide, as for scale factors printed alike).
namespace {

// The same collective of the same group, on the same kind of memory.
bool sameKind(const Request& a, const Request& b) {
  return a.type == b.type && a.dtype == b.dtype && a.onCuda() == b.onCuda() && a.group_id == b.group_id &&
         a.group_size == b.group_size;
}

}  // namespace

bool agreeExactly(const Request& a, const Request& b) {
  if (!sameKind(a, b)) return false;
  switch (a.type) {
    case v1::ALLREDUCE:
    case v1::REDUCESCATTER:
      return a.shape == b.shape && a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale;
    case v1::BROADCAST:
      return a.shape == b.shape && a.root_rank == b.root_rank;
    case v1::ALLGATHER:
    case v1::ALLTOALL:
      return a.shape.size() == b.shape.size() && std::equal(a.shape.begin() + (a.shape.empty() ? 0 : 1), a.shape.end(),
                                                            b.shape.begin() + (b.shape.empty() ? 0 : 1));
    case v1::PROCESS_SET_ADD:
      return a.set_ranks == b.set_ranks;
    case v1::PROCESS_SET_REMOVE:
      return a.target_set == b.target_set;
    default:
      return true;
  }
}

// Whether every present request agrees exactly with the first, none failed
// at the call.
bool allAgreeExactly(const Response& response) {
  const Request& first = response.first();
  for (const auto& r : response.requests) {
    if (r && (!r->abandoned.empty() || !agreeExactly(first, *r))) return false;
  }
  return true;
}

// Cross-request rules beyond "all equal". `prefix_of` runs only for an error.
namespace {

Status checkAdasum(const std::function<std::string()>& prefix_of, const Response& response) {
  const size_t n = response.ranks.size();
  if ((n & (n - 1)) != 0) {
    return failedPrecondition(prefix_of() + "Adasum needs a power-of-two number of ranks, the process set has " +
                              std::to_string(n));
  }
  if (response.activeCount() != static_cast<int>(n)) {
    return failedPrecondition(prefix_of() + "Adasum does not run with joined ranks");
  }
  return okStatus();
}

}  // namespace

Status checkCollectiveRules(const std::function<std::string()>& prefix_of, const Response& response) {
  const Request& first = response.first();
  if (first.type == v1::BROADCAST) {
    bool root_in_set = false;
    for (size_t i = 0; i < response.ranks.size(); ++i) {
      if (response.ranks[i] == first.root_rank) root_in_set = response.requests[i].has_value();
    }
    if (!root_in_set) {
      return failedPrecondition(prefix_of() + "broadcast root rank " + std::to_string(first.root_rank) +
                                " is not an active member of process set " + std::to_string(response.process_set_id) +
                                " " + ranksString(response.ranks));
    }
  }
  if (first.type == v1::ALLTOALL) {
    for (const auto& r : response.requests) {
      if (r && r->splits.size() != response.ranks.size()) {
        return failedPrecondition(prefix_of() + "rank " + std::to_string(r->rank) + " gave " +
                                  std::to_string(r->splits.size()) + " alltoall splits for a process set of " +
                                  std::to_string(response.ranks.size()) + " ranks");
      }
    }
  }
  if (first.type == v1::ALLREDUCE && first.op == v1::ADASUM) RETURN_IF_ERROR(checkAdasum(prefix_of, response));
  if (first.type != v1::ALLREDUCE && first.type != v1::BARRIER && first.type != v1::JOIN &&
      response.activeCount() != static_cast<int>(response.ranks.size())) {
    std::vector<int> joined;
    for (size_t i = 0; i < response.ranks.size(); ++i) {
      if (!response.requests[i]) joined.push_back(response.ranks[i]);
    }
    return failedPrecondition(prefix_of() + "ranks " + ranksString(joined) +
                              " have joined; only allreduce and barrier " + "run with joined ranks, " +
                              collectiveName(first.type) + " does not");
  }
  return okStatus();
}

}  // namespace

Status checkAgreement(const std::string& job_id, const Response& response) {
  auto prefix_of = [&] { return "job '" + job_id + "' tensor '" + response.name + "': "; };
  if (allAgreeExactly(response)) return checkCollectiveRules(prefix_of, response);
  const std::string prefix = prefix_of();
  // A rank that failed the call itself: the others fail with its reason.
  for (const auto& r : response.requests) {
    if (r && !r->abandoned.empty()) {
      return failedPrecondition(prefix + "rank " + std::to_string(r->rank) + " failed its " + collectiveName(r->type) +
                                " at the call: " + r->abandoned);
    }
  }
  for (const auto& [what, describe] : checksFor(response.first().type)) {
    if (auto message = differs(response, what, describe)) return failedPrecondition(prefix + *message);
  }
  return checkCollectiveRules(prefix_of, response);
}

}  // namespace gradsync::coordinator
