// SPDX-License-Identifier: Apache-2.0
#include "daemon/fusion/fusion_planner.h"

namespace gradsync::fusion {
namespace {

std::vector<bool> presence(const Response& r) {
  std::vector<bool> present;
  for (const auto& request : r.requests) present.push_back(request.has_value());
  return present;
}

}  // namespace

bool fusable(const Response& a, const Response& b) {
  if (!a.status.isOk() || !b.status.isOk()) return false;
  if (a.type != v1::ALLREDUCE || b.type != v1::ALLREDUCE) return false;
  const auto& x = a.first();
  const auto& y = b.first();
  return x.dtype == y.dtype && x.onCuda() == y.onCuda() && x.op == y.op && x.prescale == y.prescale &&
         x.postscale == y.postscale && a.process_set_id == b.process_set_id && presence(a) == presence(b);
}

std::vector<FusedResponse> planFusion(std::vector<Response> ready, uint64_t threshold_bytes) {
  std::vector<FusedResponse> plan;
  std::vector<bool> taken(ready.size(), false);
  for (size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    FusedResponse bucket;
    bucket.bytes = ready[i].first().length;
    const bool can_fuse = ready[i].status.isOk() && ready[i].type == v1::ALLREDUCE;
    for (size_t j = i + 1; can_fuse && j < ready.size(); ++j) {
      if (taken[j] || !fusable(ready[i], ready[j])) continue;
      const uint64_t bytes = ready[j].first().length;
      if (bucket.bytes + bytes > threshold_bytes) continue;
      taken[j] = true;
      bucket.bytes += bytes;
      bucket.responses.push_back(std::move(ready[j]));
    }
    bucket.responses.insert(bucket.responses.begin(), std::move(ready[i]));
    plan.push_back(std::move(bucket));
  }
  return plan;
}

}  // namespace gradsync::fusion
