// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/direct_allreduce.h"

#include <cstring>
#include <string>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::collective {
namespace {
// Phase 5 of the data plane's tag space (ring 0 and 1, pairwise exchange
// 2, rounds 3, goodbye 4); the step is the sender's position.
constexpr int kDirectPhase = 5;
}  // namespace

Status directAllreduce(const MeshContext& mesh, void* data, size_t count, DataType dtype, ReduceOp op,
                       std::vector<uint8_t>* scratch) {
  const int n = mesh.size();
  if (n <= 1 || count == 0) return okStatus();
  if (mesh.rank < 0 || mesh.rank >= n) return invalidArgument("direct allreduce: position outside the mesh");
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("direct allreduce: unknown dtype");
  const size_t bytes = count * esize;
  scratch->resize(bytes * n);
  uint8_t* slots = scratch->data();  // node i's contribution at slot i
  std::memcpy(slots + bytes * mesh.rank, data, bytes);
  std::vector<transport::RequestPtr> requests;
  for (int step = 1; step < n; ++step) {
    const int from = (mesh.rank - step + n) % n;
    requests.push_back(mesh.peers[from]->irecv(slots + bytes * from, bytes,
                                               ringTag(mesh.tag_key, mesh.id, kDirectPhase, from, 0, from)));
  }
  for (int step = 1; step < n; ++step) {
    const int to = (mesh.rank + step) % n;
    requests.push_back(mesh.peers[to]->isend(slots + bytes * mesh.rank, bytes,
                                             ringTag(mesh.tag_key, mesh.id, kDirectPhase, mesh.rank, 0, mesh.rank)));
  }
  std::vector<transport::Request*> raw;
  for (auto& r : requests) raw.push_back(r.get());
  RETURN_IF_ERROR(mesh.transport->waitAll(
      raw.data(), raw.size(), mesh.deadline,
      "direct allreduce of node " + std::to_string(mesh.rank) + " with " + std::to_string(n - 1) + " other nodes"));
  std::vector<const void*> inputs(n);
  for (int i = 0; i < n; ++i) inputs[i] = slots + bytes * i;
  void* outputs[] = {data};
  reduce::ReduceArgs args;
  args.dtype = dtype;
  args.op = op;
  args.inputs = inputs.data();
  args.num_inputs = n;
  args.outputs = outputs;
  args.num_outputs = 1;
  reduce::reduceRange(args, 0, count);
  return okStatus();
}

}  // namespace gradsync::collective
