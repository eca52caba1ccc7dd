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
    case AllreduceAlgorithm::kHalvingDoubling:
      return "halving-doubling";
  }
  return "?";
}

double modelledUs(AllreduceAlgorithm algorithm, size_t bytes, int nodes, const LinkCost& cost) {
  const double n = nodes, b = static_cast<double>(bytes);
  switch (algorithm) {
    case AllreduceAlgorithm::kDirect:  // n-1 sends and n-1 receives at once, one latency
      return cost.latency_us + 2 * (n - 1) * cost.message_us + (n - 1) * b * (cost.byte_us + cost.reduce_byte_us);
    case AllreduceAlgorithm::kRecursiveDoubling: {  // node 0 takes the most steps; each also reduces the buffer
      const double steps = static_cast<double>(doublingSteps(0, nodes).size());
      return steps * (cost.latency_us + 2 * cost.message_us + 2 * b * cost.byte_us + b * cost.reduce_byte_us);
    }
    case AllreduceAlgorithm::kRing:  // 2(n-1) steps of b/n bytes
      return 2 * (n - 1) * (cost.latency_us + 2 * cost.message_us + b / n * cost.byte_us);
    case AllreduceAlgorithm::kHalvingDoubling: {  // 2 log2 p steps moving 2(p-1)/p b in all
      int p = 1, levels = 0;
      while (p * 2 <= nodes) p *= 2, ++levels;
      const double step_us = cost.latency_us + 2 * cost.message_us;
      double us = 2 * levels * step_us + (p - 1.0) / p * b * (2 * cost.byte_us + cost.reduce_byte_us);
      if (p < nodes)
        us += 2 * (step_us + b * cost.byte_us) + b * cost.reduce_byte_us;  // an extra node's buffer in, the result out
      return us;
    }
  }
  return 0;
}

AllreduceAlgorithm chooseAllreduce(size_t bytes, int nodes, const LinkCost& cost) {
  AllreduceAlgorithm best = AllreduceAlgorithm::kRing;
  double best_us = modelledUs(best, bytes, nodes, cost);
  // Strictly cheaper than the ring: with as many steps (2 nodes) the ring
  // pipelines its chunks.
  if (bytes <= kHalvingMaxBytes) {
    const double us = modelledUs(AllreduceAlgorithm::kHalvingDoubling, bytes, nodes, cost);
    if (us < best_us) best = AllreduceAlgorithm::kHalvingDoubling, best_us = us;
  }
  for (AllreduceAlgorithm candidate : {AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kDirect}) {
    if (candidate == AllreduceAlgorithm::kDirect && bytes * (nodes - 1) > kDirectAllreduceMaxBytes) continue;
    if (candidate == AllreduceAlgorithm::kRecursiveDoubling && bytes > kDoublingMaxBytes) continue;
    const double us = modelledUs(candidate, bytes, nodes, cost);
    if (us <= best_us) best = candidate, best_us = us;
  }
  return best;
}

}  // namespace gradsync::collective
