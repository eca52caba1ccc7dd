// SPDX-License-Identifier: Apache-2.0
#include "daemon/coordinator/request.h"

namespace gradsync::coordinator {

const Request& Response::first() const {
  for (const auto& r : requests) {
    if (r) return *r;
  }
  static const Request kEmpty;  // unreachable in practice: a response has a request
  return kEmpty;
}

int Response::activeCount() const {
  int n = 0;
  for (const auto& r : requests) n += r.has_value();
  return n;
}

std::string ranksString(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace gradsync::coordinator
