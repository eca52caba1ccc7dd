// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/gpu_inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

namespace gradsync::gpu {
namespace {

using ::testing::MatchesRegex;

TEST(GpuInventory, UuidFormatMatchesNvidiaSmi) {
  const unsigned char bytes[16] = {0x8e, 0x0b, 0x19, 0x77, 0x1f, 0xa4, 0x2c, 0x3e,
                                   0x91, 0x00, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45};
  EXPECT_EQ(formatGpuUuid(bytes), "GPU-8e0b1977-1fa4-2c3e-9100-abcdef012345");
}

// Runs everywhere: without a GPU (CI) the list is empty and the note says
// why; on a GPU machine every entry is complete.
TEST(GpuInventory, EitherGpusOrAReason) {
  const GpuInventory inventory = probeGpus();
  if (inventory.gpus.empty()) {
    EXPECT_FALSE(inventory.note.empty());
    return;
  }
  for (const auto& gpu : inventory.gpus) {
    EXPECT_THAT(gpu.uuid, MatchesRegex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.total_memory_bytes, 0u);
    EXPECT_FALSE(gpu.compute_mode.empty());
  }
}

TEST(GpuInventory, NumaNodeComesFromThePciDeviceInSysfs) {
  char root[] = "/tmp/gs_sysfs_XXXXXX";
  ASSERT_NE(::mkdtemp(root), nullptr);
  // sysfs names devices in lower case; CUDA reports the bus id in upper case.
  const std::string device = std::string(root) + "/bus/pci/devices/0000:1b:00.0";
  ASSERT_EQ(std::system(("mkdir -p '" + device + "' && echo 1 > '" + device + "/numa_node'").c_str()), 0);
  EXPECT_EQ(numaNodeOf("0000:1B:00.0", root), 1);
  EXPECT_EQ(numaNodeOf("0000:1b:00.0", root), 1);
  EXPECT_EQ(numaNodeOf("0000:18:00.0", root), -1);  // no such device
  EXPECT_EQ(numaNodeOf("", root), -1);
  EXPECT_EQ(numaNodeOf("../../../etc", root), -1);
  ASSERT_EQ(std::system(("echo -1 > '" + device + "/numa_node'").c_str()), 0);  // a machine without NUMA
  EXPECT_EQ(numaNodeOf("0000:1B:00.0", root), -1);
  ASSERT_EQ(std::system(("rm -rf '" + std::string(root) + "'").c_str()), 0);
}

TEST(GpuInventory, MpsFollowsThePipeDirectory) {
  char dir[] = "/tmp/gs_mps_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
  EXPECT_FALSE(probeGpus().mps);
  const std::string control = std::string(dir) + "/control";
  FILE* f = std::fopen(control.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const GpuInventory inventory = probeGpus();
  EXPECT_TRUE(inventory.mps);
  EXPECT_EQ(inventory.mps_pipe, dir);
  std::remove(control.c_str());
  ::rmdir(dir);
  ::unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}

}  // namespace
}  // namespace gradsync::gpu
