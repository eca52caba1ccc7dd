// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/halving_doubling.h"

#include <string>
#include <utility>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::collective {
namespace {
// Phase 7 of the data plane's tag space (ring 0 and 1, pairwise exchange
// 2, rounds 3, goodbye 4, direct allreduce 5, recursive doubling 6).
constexpr int kHalvingPhase = 7;
// The extra node's buffer in and the result out; the halving and doubling
// steps take stages 1 to 2 log2 p in between.
constexpr int kFoldStage = 0;
constexpr int kResultStage = 63;
}  // namespace

std::vector<HalvingStep> halvingSteps(int rank, int n, size_t count) {
  std::vector<HalvingStep> steps;
  if (n <= 1 || rank < 0 || rank >= n) return steps;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const ElementRange all{0, count};
  if (rank >= p) {
    steps.push_back({rank - p, kFoldStage, all, {}, false});
    steps.push_back({rank - p, kResultStage, {}, all, false});
    return steps;
  }
  const bool absorbs = rank + p < n;
  if (absorbs) steps.push_back({rank + p, kFoldStage, {}, all, true});
  // Halving: the partner across the highest bit first; the node whose bit
  // is clear keeps the lower half. Both partners hold the same range at
  // each level (their higher bits agree).
  std::vector<std::pair<ElementRange, ElementRange>> kept_given;
  ElementRange range = all;
  int stage = 1;
  for (int mask = p / 2; mask >= 1; mask /= 2) {
    const ElementRange low{range.begin, range.count / 2};
    const ElementRange high{range.begin + low.count, range.count - low.count};
    const bool keeps_low = (rank & mask) == 0;
    const ElementRange keep = keeps_low ? low : high;
    const ElementRange give = keeps_low ? high : low;
    steps.push_back({rank ^ mask, stage++, give, keep, true});
    kept_given.emplace_back(keep, give);
    range = keep;
  }
  // Doubling: the same partners in reverse, each giving back its half.
  for (int mask = 1, level = static_cast<int>(kept_given.size()) - 1; mask < p; mask *= 2, --level) {
    const auto& [keep, give] = kept_given[level];
    steps.push_back({rank ^ mask, stage++, keep, give, false});
  }
  if (absorbs) steps.push_back({rank + p, kResultStage, all, {}, false});
  return steps;
}

Status halvingDoublingAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op,
                                std::vector<uint8_t>* scratch) {
  const int n = mesh.size();
  if (n <= 1 || count == 0) return okStatus();
  if (mesh.rank < 0 || mesh.rank >= n) return invalidArgument("halving-doubling allreduce: position outside the mesh");
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("halving-doubling allreduce: unknown dtype");
  const std::vector<HalvingStep> steps = halvingSteps(mesh.rank, n, count);
  // What a reducing step receives lands in scratch, the rest in place.
  std::vector<size_t> scratch_at(steps.size(), 0);
  size_t scratch_elements = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].reduce) continue;
    scratch_at[i] = scratch_elements;
    scratch_elements += steps[i].receive.count;
  }
  scratch->resize(scratch_elements * esize);
  auto* buffer = static_cast<uint8_t*>(data);
  const auto tag = [&](int from, int stage) {
    return ringTag(mesh.tag_key, mesh.id, kHalvingPhase, from, static_cast<size_t>(stage), from);
  };
  // Every receive posted at once: a partner ahead of this node finds its
  // receive waiting. (A receive into the buffer is for a range this node
  // has sent already by the time anyone can send it there.)
  std::vector<transport::RequestPtr> receives(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const HalvingStep& s = steps[i];
    if (s.receive.count == 0) continue;
    uint8_t* into = s.reduce ? scratch->data() + scratch_at[i] * esize : buffer + s.receive.begin * esize;
    receives[i] = mesh.peers[s.peer]->irecv(into, s.receive.count * esize, tag(s.peer, s.stage));
  }
  const std::string what =
      "allreduce of " + std::to_string(count * esize) + " bytes: node " + std::to_string(mesh.rank);
  for (size_t i = 0; i < steps.size(); ++i) {
    const HalvingStep& s = steps[i];
    transport::RequestPtr send;
    std::vector<transport::Request*> raw;
    if (s.send.count > 0) {
      send = mesh.peers[s.peer]->isend(buffer + s.send.begin * esize, s.send.count * esize, tag(mesh.rank, s.stage));
      raw.push_back(send.get());
    }
    if (receives[i]) raw.push_back(receives[i].get());
    RETURN_IF_ERROR(mesh.transport->waitAll(raw.data(), raw.size(), mesh.deadline,
                                            what + " with node " + std::to_string(s.peer) +
                                                " (halving and doubling, step " + std::to_string(i + 1) + " of " +
                                                std::to_string(steps.size()) + ")"));
    if (s.reduce && s.receive.count > 0) {
      reduce::combineInto(dtype, op, scratch->data() + scratch_at[i] * esize, buffer + s.receive.begin * esize,
                          s.receive.count, s.peer < mesh.rank);
    }
  }
  return okStatus();
}

}  // namespace gradsync::collective
