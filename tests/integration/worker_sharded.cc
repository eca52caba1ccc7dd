// SPDX-License-Identifier: Apache-2.0
// A sharded-data-parallel loop (as FSDP's): per step, every layer's
// parameters gathered from their shards, gradients reduce-scattered, a
// grouped allreduce of norms, a broadcast and an alltoall; the values change
// every step and every result is checked.
#include <string>
#include <vector>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

constexpr int kLayers = 3;
constexpr int64_t kCols = 4;

// Element i of rank r's shard of layer l at step s (exact in float32).
float shardValue(int r, int l, int s, int64_t i) { return static_cast<float>(r * 10000 + l * 1000 + s * 10 + i % 10); }

int gatherLayers(Client& c, int step, std::vector<Operation>* handles, std::vector<std::vector<float>>* shards,
                 const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes) {
  for (int l = 0; l < kLayers; ++l) {
    auto& shard = (*shards)[l];
    for (size_t i = 0; i < shard.size(); ++i) shard[i] = shardValue(c.rank(), l, step, static_cast<int64_t>(i));
    gradsync_op_t op = makeOp(GRADSYNC_ALLGATHER, names[l].c_str(), shard.data(), GRADSYNC_FLOAT32, shapes[l]);
    WORKER_OK(c.start(op, &(*handles)[l]));
  }
  return 0;
}

int checkGathered(Client& c, int step, std::vector<Operation>* handles,
                  const std::vector<std::vector<int64_t>>& shapes) {
  for (int l = 0; l < kLayers; ++l) {
    gradsync_result_t out;
    WORKER_OK((*handles)[l].output(&out));
    const int64_t rows = shapes[l][0];
    WORKER_CHECK(out.ndim == 2 && out.shape[0] == rows * c.size(), "step %d layer %d: %ld rows", step, l,
                 static_cast<long>(out.shape[0]));
    const auto* got = static_cast<const float*>(out.data);
    for (int r = 0; r < c.size(); ++r) {
      for (int64_t i = 0; i < rows * kCols; ++i) {
        const float want = shardValue(r, l, step, i);
        WORKER_CHECK(got[r * rows * kCols + i] == want, "step %d layer %d rank %d element %ld: %g, want %g", step, l, r,
                     static_cast<long>(i), got[r * rows * kCols + i], want);
      }
    }
  }
  return 0;
}

}  // namespace

int shardedStepsScenario(Client& c, const std::vector<std::string>& args) {
  const int steps = args.empty() ? 12 : std::stoi(args[0]);
  const int n = c.size(), me = c.rank();
  std::vector<std::string> gather_names(kLayers);
  std::vector<std::vector<int64_t>> shard_shapes(kLayers);
  std::vector<std::vector<float>> shards(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    gather_names[l] = "layer" + std::to_string(l) + ".params";
    shard_shapes[l] = {2 + l, kCols};
    shards[l].resize((2 + l) * kCols);
  }
  const std::vector<int64_t> grad_shape = {2 * n, 3};
  const std::vector<int64_t> norm_shape = {5};
  const std::vector<int64_t> bcast_shape = {6};
  const std::vector<int64_t> a2a_shape = {n, 2};
  const std::vector<int64_t> splits(n, 1);
  const char* norm_names[] = {"norm.a", "norm.b", "norm.c"};
  const int root = n - 1;
  for (int s = 0; s < steps; ++s) {
    std::vector<Operation> gathers(kLayers);
    if (int rc = gatherLayers(c, s, &gathers, &shards, gather_names, shard_shapes); rc != 0) return rc;
    std::vector<float> grads(2 * n * 3);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>((me + 1) * (i + s));
    Operation scatter;
    gradsync_op_t rs = makeOp(GRADSYNC_REDUCESCATTER, "grads", grads.data(), GRADSYNC_FLOAT32, grad_shape);
    rs.reduce_op = GRADSYNC_SUM;
    WORKER_OK(c.start(rs, &scatter));
    std::vector<std::vector<float>> norms(3, std::vector<float>(5));
    std::vector<gradsync_op_t> group;
    for (int t = 0; t < 3; ++t) {
      for (int i = 0; i < 5; ++i) norms[t][i] = static_cast<float>(me + t + i + s);
      group.push_back(makeOp(GRADSYNC_ALLREDUCE, norm_names[t], norms[t].data(), GRADSYNC_FLOAT32, norm_shape));
    }
    std::vector<Operation> grouped;
    WORKER_OK(c.startGroup(group, &grouped));
    std::vector<float> bcast(6);
    for (int i = 0; i < 6; ++i) bcast[i] = me == root ? static_cast<float>(s * 7 + i) : -1.0f;
    gradsync_op_t b = makeOp(GRADSYNC_BROADCAST, "step.seed", bcast.data(), GRADSYNC_FLOAT32, bcast_shape);
    b.root_rank = root;
    Operation broadcast;
    WORKER_OK(c.start(b, &broadcast));
    std::vector<float> send(n * 2);
    for (int j = 0; j < n; ++j) send[2 * j] = send[2 * j + 1] = static_cast<float>(me * 100 + j * 10 + s);
    gradsync_op_t a = makeOp(GRADSYNC_ALLTOALL, "experts", send.data(), GRADSYNC_FLOAT32, a2a_shape);
    a.splits = splits.data();
    a.num_splits = n;
    Operation exchange;
    WORKER_OK(c.start(a, &exchange));

    for (auto& h : gathers) WORKER_OK(h.wait(30));
    if (int rc = checkGathered(c, s, &gathers, shard_shapes); rc != 0) return rc;
    WORKER_OK(scatter.wait(30));
    gradsync_result_t out;
    WORKER_OK(scatter.output(&out));
    WORKER_CHECK(out.shape[0] == 2 && out.shape[1] == 3, "step %d: reducescatter shape [%ld, %ld]", s,
                 static_cast<long>(out.shape[0]), static_cast<long>(out.shape[1]));
    for (int i = 0; i < 6; ++i) {
      const float want = n * (n + 1) / 2.0f * static_cast<float>(me * 6 + i + s);
      WORKER_CHECK(static_cast<const float*>(out.data)[i] == want, "step %d: reducescatter element %d", s, i);
    }
    for (auto& h : grouped) WORKER_OK(h.wait(30));
    for (int t = 0; t < 3; ++t) {
      for (int i = 0; i < 5; ++i) {
        WORKER_CHECK(norms[t][i] == n * (n - 1) / 2.0f + n * (t + i + s), "step %d: %s element %d = %g", s,
                     norm_names[t], i, norms[t][i]);
      }
    }
    WORKER_OK(broadcast.wait(30));
    for (int i = 0; i < 6; ++i) WORKER_CHECK(bcast[i] == s * 7 + i, "step %d: broadcast element %d", s, i);
    WORKER_OK(exchange.wait(30));
    WORKER_OK(exchange.output(&out));
    const auto* got = static_cast<const float*>(out.data);
    for (int j = 0; j < n; ++j) {
      WORKER_CHECK(got[2 * j] == j * 100 + me * 10 + s, "step %d: alltoall row from rank %d = %g", s, j, got[2 * j]);
    }
  }
  return 0;
}

}  // namespace gradsync::worker
