// SPDX-License-Identifier: Apache-2.0
// Data-parallel linear regression through gradsyncd: each rank trains on its
// own shard; gradients are averaged with allreduce every step, so every rank
// ends with the same weights. Identity comes from GRADSYNC_* variables (set
// by scripts/run_example.sh).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gradsync/gradsync.hpp"

namespace {

constexpr int kFeatures = 8;
constexpr int kSamplesPerRank = 4096;
constexpr int kSteps = 200;
constexpr float kLearningRate = 0.1f;

struct Shard {
  std::vector<float> x;  // kSamplesPerRank x kFeatures
  std::vector<float> y;
};

Shard makeShard(int rank) {
  std::mt19937 rng(1234 + rank);
  std::normal_distribution<float> normal(0.f, 1.f);
  Shard s;
  s.x.resize(kSamplesPerRank * kFeatures);
  s.y.resize(kSamplesPerRank);
  for (int i = 0; i < kSamplesPerRank; ++i) {
    float target = 0.5f;  // bias term folded into the last feature below
    for (int j = 0; j < kFeatures; ++j) {
      float v = j == kFeatures - 1 ? 1.f : normal(rng) + 0.3f * rank;  // shards differ in distribution
      s.x[i * kFeatures + j] = v;
      target += (j + 1) * 0.25f * v;
    }
    s.y[i] = target + 0.01f * normal(rng);
  }
  return s;
}

// Local mean squared error and its gradient (written into grad[0..kFeatures),
// loss into grad[kFeatures] so one allreduce carries both).
void gradient(const Shard& s, const float* w, float* grad) {
  std::memset(grad, 0, sizeof(float) * (kFeatures + 1));
  for (int i = 0; i < kSamplesPerRank; ++i) {
    float pred = 0.f;
    for (int j = 0; j < kFeatures; ++j) pred += s.x[i * kFeatures + j] * w[j];
    const float err = pred - s.y[i];
    for (int j = 0; j < kFeatures; ++j) grad[j] += 2.f * err * s.x[i * kFeatures + j] / kSamplesPerRank;
    grad[kFeatures] += err * err / kSamplesPerRank;
  }
}

int fail(const char* what, const gradsync::Result& r) {
  std::fprintf(stderr, "linear_regression: %s failed: %s\n", what, r.message.c_str());
  return 1;
}

}  // namespace

int main() {
  gradsync::Client client;
  gradsync::Result r = gradsync::Client::connect(&client);
  if (!r.ok()) return fail("connect", r);
  const int rank = client.rank();
  const int size = client.size();
  const Shard shard = makeShard(rank);

  // Weights and gradients live in the shared arena: no copies on the way.
  auto* w = static_cast<float*>(client.alloc(sizeof(float) * kFeatures));
  auto* grad = static_cast<float*>(client.alloc(sizeof(float) * (kFeatures + 1)));
  for (int j = 0; j < kFeatures; ++j) w[j] = rank == 0 ? 0.f : 100.f + rank;  // deliberately different

  gradsync_op_t bcast;
  gradsync_op_init(&bcast);
  const int64_t wshape[1] = {kFeatures};
  bcast.collective = GRADSYNC_BROADCAST;
  bcast.name = "initial_weights";
  bcast.data = w;
  bcast.ndim = 1;
  bcast.shape = wshape;
  bcast.root_rank = 0;
  gradsync::Operation op;
  if (!(r = client.start(bcast, &op)).ok() || !(r = op.wait()).ok()) return fail("broadcast", r);

  for (int step = 0; step < kSteps; ++step) {
    gradient(shard, w, grad);
    char name[32];
    std::snprintf(name, sizeof(name), "grad.%d", step);
    if (!(r = client.allreduce(name, grad, GRADSYNC_FLOAT32, {kFeatures + 1}, GRADSYNC_AVERAGE)).ok()) {
      return fail("allreduce", r);
    }
    for (int j = 0; j < kFeatures; ++j) w[j] -= kLearningRate * grad[j];
    if (rank == 0 && (step % 20 == 0 || step == kSteps - 1)) {
      std::printf("step %3d  loss %.6f (mean over %d ranks)\n", step, grad[kFeatures], size);
      std::fflush(stdout);
    }
  }

  // Every rank gathers everybody's weights and checks they are identical.
  gradsync_op_t gather;
  gradsync_op_init(&gather);
  const int64_t gshape[2] = {1, kFeatures};
  gather.collective = GRADSYNC_ALLGATHER;
  gather.name = "final_weights";
  gather.data = w;
  gather.ndim = 2;
  gather.shape = gshape;
  if (!(r = client.start(gather, &op)).ok() || !(r = op.wait()).ok()) return fail("allgather", r);
  gradsync_result_t all;
  if (!(r = op.output(&all)).ok()) return fail("allgather result", r);
  const float* weights = static_cast<const float*>(all.data);
  bool identical = true;
  for (int k = 1; k < size; ++k)
    identical &= std::memcmp(weights, weights + k * kFeatures, sizeof(float) * kFeatures) == 0;
  std::printf("rank %d final weights:", rank);
  for (int j = 0; j < kFeatures; ++j) std::printf(" %.4f", w[j]);
  std::printf("\nrank %d: weights %s on all %d ranks\n", rank, identical ? "IDENTICAL" : "DIFFER", size);
  return identical ? 0 : 2;
}
