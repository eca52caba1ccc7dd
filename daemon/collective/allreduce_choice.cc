// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/allreduce_choice.h"

#include "daemon/collective/direct_allreduce.h"
#include "daemon/collective/recursive_doubling.h"

namespace gradsync::collective {

const char* algorithmName(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kDirect:
      return "direct";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return "recursive doubling";
    case AllreduceAlgorithm::kRing:
      return "ring";
  }
  return "?";
}

double modelledUs(AllreduceAlgorithm algorithm, size_t bytes, int nodes, const LinkCost& cost) {
  const double n = nodes, b = static_cast<double>(bytes);
  switch (algorithm) {
    case AllreduceAlgorithm::kDirect:  // n-1 sends and n-1 receives at once, one latency
      return cost.latency_us + 2 * (n - 1) * cost.message_us + (n - 1) * b * cost.byte_us;
    case AllreduceAlgorithm::kRecursiveDoubling: {  // node 0 takes the most steps; each also reduces the buffer
      const double steps = static_cast<double>(doublingSteps(0, nodes).size());
      return steps * (cost.latency_us + 2 * cost.message_us + 2 * b * cost.byte_us);
    }
    case AllreduceAlgorithm::kRing:  // 2(n-1) steps of b/n bytes
      return 2 * (n - 1) * (cost.latency_us + 2 * cost.message_us + b / n * cost.byte_us);
  }
  return 0;
}

AllreduceAlgorithm chooseAllreduce(size_t bytes, int nodes, const LinkCost& cost) {
  AllreduceAlgorithm best = AllreduceAlgorithm::kRing;
  double best_us = modelledUs(best, bytes, nodes, cost);
  for (AllreduceAlgorithm candidate : {AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kDirect}) {
    if (candidate == AllreduceAlgorithm::kDirect && bytes * (nodes - 1) > kDirectAllreduceMaxBytes) continue;
    if (candidate == AllreduceAlgorithm::kRecursiveDoubling && bytes > kDoublingMaxBytes) continue;
    const double us = modelledUs(candidate, bytes, nodes, cost);
    if (us <= best_us) best = candidate, best_us = us;
  }
  return best;
}

}  // namespace gradsync::collective
