// SPDX-License-Identifier: Apache-2.0
// The CUDA path end to end on a machine without a GPU: real client
// processes whose "device memory" comes from a stand-in CUDA driver, a real
// gradsyncd (over a host-memory GPU) reached through the same hand-off
// frames, validation, executor and completion as on a GPU.
#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

class FakeGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.useBinary("tests/fakegpu/gradsyncd_fakegpu");
    std::string error;
    ASSERT_TRUE(daemon_.start({"--log-level", "info"}, &error)) << error;
  }
  void TearDown() override { EXPECT_EQ(daemon_.stop(), 0) << daemon_.log(); }
  std::map<std::string, std::string> fakeDriver() const {
    return {{"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  }
  DaemonFixture daemon_;
};

TEST_F(FakeGpuTest, EveryCollectiveOnCudaTensorsWithTwoAndThreeRanks) {
  for (int size : {2, 3}) {
    std::vector<Process> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.push_back(daemon_.spawnRank("fake-cuda-" + std::to_string(size), r, size, {"fake_cuda"}, fakeDriver()));
    }
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon_.log();
  }
  // Each rank attached its GPU once and exported each allocation once
  // (again after releasing them).
  const std::string log = daemon_.log();
  EXPECT_NE(log.find("attached GPU GPU-fa4e0000-0000-0000-0000-000000000001"), std::string::npos) << log;
}

}  // namespace
}  // namespace gradsync::testutil
