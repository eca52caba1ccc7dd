// SPDX-License-Identifier: Apache-2.0
#include "daemon/fusion/fusion_planner.h"

#include "gtest/gtest.h"

namespace gradsync::fusion {
namespace {

using coordinator::Request;

Response make(const std::string& name, uint64_t bytes, DataType dtype = v1::FLOAT32,
              CollectiveType type = v1::ALLREDUCE) {
  Response r;
  r.name = name;
  r.type = type;
  r.ranks = {0, 1};
  for (int rank = 0; rank < 2; ++rank) {
    Request q;
    q.rank = rank;
    q.name = name;
    q.type = type;
    q.dtype = dtype;
    q.op = v1::SUM;
    q.length = bytes;
    r.requests.push_back(q);
  }
  return r;
}

std::vector<std::vector<std::string>> names(const std::vector<FusedResponse>& plan) {
  std::vector<std::vector<std::string>> out;
  for (const auto& bucket : plan) {
    out.emplace_back();
    for (const auto& r : bucket.responses) out.back().push_back(r.name);
  }
  return out;
}

TEST(FusionPlannerTest, FusesCompatibleAllreducesUpToThreshold) {
  auto plan = planFusion({make("a", 40), make("b", 40), make("c", 40), make("d", 10)}, 100);
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"a", "b", "d"}, {"c"}}));
  EXPECT_EQ(plan[0].bytes, 90u);
}

TEST(FusionPlannerTest, OversizedTensorIsAloneAndOthersStillFuse) {
  auto plan = planFusion({make("big", 500), make("x", 10), make("y", 10)}, 100);
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"big"}, {"x", "y"}}));
}

TEST(FusionPlannerTest, NeverFusesAcrossDtypesTypesOrErrors) {
  auto failed = make("err", 4);
  failed.status = failedPrecondition("mismatch");
  auto plan = planFusion(
      {make("f32", 4), make("f64", 4, v1::FLOAT64), make("bc", 4, v1::FLOAT32, v1::BROADCAST), failed, make("f32b", 4)},
      1 << 20);
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"f32", "f32b"}, {"f64"}, {"bc"}, {"err"}}));
}

TEST(FusionPlannerTest, NeverFusesCpuWithCudaTensors) {
  auto gpu = make("gpu", 4);
  for (auto& q : gpu.requests.mutableAll()) q->cuda = coordinator::CudaRef{1, 0, 0};
  auto gpu2 = make("gpu2", 4);
  for (auto& q : gpu2.requests.mutableAll()) q->cuda = coordinator::CudaRef{2, 0, 1};
  auto plan = planFusion({make("cpu", 4), gpu, make("cpu2", 4), gpu2}, 1 << 20);
  EXPECT_EQ(names(plan), (std::vector<std::vector<std::string>>{{"cpu", "cpu2"}, {"gpu", "gpu2"}}));
}

TEST(FusionPlannerTest, DifferentJoinedRanksAreNotFused) {
  auto partial = make("p", 4);
  partial.requests.mutableAt(1).reset();
  auto plan = planFusion({make("full", 4), partial}, 1 << 20);
  EXPECT_EQ(plan.size(), 2u);
}

TEST(FusionPlannerTest, SamePlanForSameInput) {
  std::vector<Response> input;
  for (int i = 0; i < 50; ++i) input.push_back(make("t" + std::to_string(i), 7 * i + 1));
  EXPECT_EQ(names(planFusion(input, 300)), names(planFusion(input, 300)));
}

}  // namespace
}  // namespace gradsync::fusion
