// SPDX-License-Identifier: Apache-2.0
// The CUDA path end to end on a machine without a GPU: real client
// processes whose "device memory" comes from a stand-in CUDA driver, a real
// gradsyncd (over a host-memory GPU) reached through the same hand-off
// frames, validation, executor and completion as on a GPU.
#include <signal.h>

#include <fstream>
#include <iterator>
#include <regex>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

// Whether every one of `ranks` printed `text` within 30 s.
bool allSay(std::vector<Process>& ranks, const std::string& text) {
  return waitFor(
      [&] {
        return std::all_of(ranks.begin(), ranks.end(),
                           [&](Process& p) { return p.log().find(text) != std::string::npos; });
      },
      std::chrono::seconds(30));
}

std::map<std::string, std::string> fakeNccl() {
  return {{"GRADSYNC_NCCL_LIBRARY", runfile("tests/fakenccl/libnccl.so.2")}};
}

// Starts `daemon` as gradsyncd over `gpus` fake GPUs with the stand-in NCCL.
bool startOverFakeGpus(DaemonFixture& daemon, int gpus, std::string* error) {
  daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_GPUS"] = std::to_string(gpus);
  return daemon.startWrapped({}, env, {"--log-level", "info"}, error);
}

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

// The same in cuMem memory (PyTorch's expandable segments): chunks exported
// by file descriptor, mapped back to back, tensors across them, and a chunk
// the allocator replaced exported again rather than read stale.
TEST_F(FakeGpuTest, EveryCollectiveOnCuMemMemory) {
  std::vector<Process> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(daemon_.spawnRank("fake-vmm", r, 3, {"fake_cuda", "vmm"}, fakeDriver()));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon_.log();
  for (auto& rank : ranks) EXPECT_NE(rank.log().find("collectives OK (cuMem memory"), std::string::npos) << rank.log();
}

// Memory of a cudaMallocAsync pool, which exports neither way: every
// collective through the client's staging buffers.
TEST_F(FakeGpuTest, EveryCollectiveOnPoolMemory) {
  std::vector<Process> ranks;
  for (int r = 0; r < 3; ++r)
    ranks.push_back(daemon_.spawnRank("fake-pool", r, 3, {"fake_cuda", "pool"}, fakeDriver()));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon_.log();
  for (auto& rank : ranks) {
    EXPECT_NE(rank.log().find("collectives OK (cudaMallocAsync memory"), std::string::npos) << rank.log();
  }
}

// The job's timeline (GRADSYNC_TIMELINE) holds the GPU's phases of each
// collective on one node, measured with events read back: the reduction
// kernel and the copies, each a complete event on the tensor's GPU track.
std::string timelinePath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

// The timeline at `path` is whole and holds each of `phases` as a complete
// event on a tensor's GPU track.
void expectGpuPhases(const std::string& path, const std::vector<std::string>& phases) {
  std::ifstream in(path);
  const std::string trace((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(trace.empty()) << path;
  EXPECT_EQ(trace.back(), ']') << trace.substr(trace.size() > 200 ? trace.size() - 200 : 0);
  for (const std::string& phase : phases) {
    const std::regex event("\\{[^{}]*\"tid\":1,\"ph\":\"X\",\"name\":\"" + phase +
                           "\",\"ts\":[0-9]+,\"dur\":[0-9]+\\}");
    EXPECT_TRUE(std::regex_search(trace, event)) << phase << "\n" << trace.substr(0, 3000);
  }
}

TEST_F(FakeGpuTest, TheTimelineHoldsTheGpuPhases) {
  const std::string path = timelinePath("gpu_timeline.json");
  auto env = fakeDriver();
  env["GRADSYNC_TIMELINE"] = path;
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon_.spawnRank("timed", r, 2, {"fake_cuda"}, env));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon_.log();
  expectGpuPhases(path, {"GPU_REDUCE", "GPU_COPY"});
}

// The same over two GPUs of a node, as the first GPU's stream runs them:
// the reduction, NCCL over the GPUs, the copies back.
TEST(FakeGpusTimelineTest, TheTimelineHoldsTheGpuPhasesOverSeveralGpus) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(startOverFakeGpus(daemon, 2, &error)) << error;
  const std::string path = timelinePath("gpus_timeline.json");
  const std::map<std::string, std::string> rank_env = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}, {"GRADSYNC_TIMELINE", path}};
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("timed", r, 2, {"fake_cuda", "gpus", "2"}, rank_env));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon.log();
  EXPECT_NE(daemon.log().find("NCCL communicator over this node's GPUs 0, 1 formed"), std::string::npos)
      << daemon.log();
  expectGpuPhases(path, {"GPU_REDUCE", "GPU_NCCL_ALLREDUCE", "GPU_COPY"});
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

TEST_F(FakeGpuTest, ARankKilledMidCollectiveIsNamedAndTheDaemonGoesOn) {
  std::vector<Process> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(daemon_.spawnRank("cuda-kill", r, 3, {"fake_cuda_kill"}, fakeDriver()));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << daemon_.log();
  EXPECT_EQ(ranks[2].wait(kTimeout), 128 + SIGKILL) << ranks[2].log();  // killed itself
  // A new job runs on the same daemon (the dead rank's mappings went to the
  // reaper; client_gpu_test checks that they are unmapped after last use).
  std::vector<Process> next;
  for (int r = 0; r < 2; ++r) next.push_back(daemon_.spawnRank("after-kill", r, 2, {"fake_cuda"}, fakeDriver()));
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << daemon_.log();
}

// The same over several GPUs of a node (3 ranks on 3 GPUs, NCCL over them)
// and on cuMem memory: the survivors get the error naming the dead rank,
// and the next job runs on the same GPUs.
TEST(FakeGpusKillTest, ARankKilledOverSeveralGpusOrOnCuMemMemoryIsNamed) {
  const std::map<std::string, std::string> driver = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  for (const std::vector<std::string>& memory : {std::vector<std::string>{"gpus", "3"}, {"vmm"}}) {
    DaemonFixture daemon;
    std::string error;
    ASSERT_TRUE(startOverFakeGpus(daemon, 3, &error)) << error;
    std::vector<std::string> args = {"fake_cuda_kill"};
    args.insert(args.end(), memory.begin(), memory.end());
    std::vector<Process> ranks;
    for (int r = 0; r < 3; ++r) ranks.push_back(daemon.spawnRank("kill", r, 3, args, driver));
    for (int r = 0; r < 2; ++r) EXPECT_EQ(ranks[r].wait(kTimeout), 0) << ranks[r].log() << daemon.log();
    EXPECT_EQ(ranks[2].wait(kTimeout), 128 + SIGKILL) << ranks[2].log();
    std::vector<std::string> next_args = {"fake_cuda"};
    next_args.insert(next_args.end(), memory.begin(), memory.end());
    std::vector<Process> next;
    for (int r = 0; r < 3; ++r) next.push_back(daemon.spawnRank("after", r, 3, next_args, driver));
    std::string report;
    EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << daemon.log();
    if (memory.front() == "gpus") {
      EXPECT_NE(daemon.log().find("NCCL communicator over this node's GPUs 0, 1, 2 formed"), std::string::npos)
          << daemon.log();
    }
    EXPECT_EQ(daemon.stop(), 0) << daemon.log();
  }
}

// Placement, as `gradsyncctl jobs` shows it: one GPU presented as 2
// (--virtual-gpus-per-gpu), rank r of a job on the (r mod 2)-th, each with
// its mapped allocations.
TEST(FakeGpuPlacementTest, GradsyncctlJobsShowsEachRanksGpu) {
  DaemonFixture daemon;
  daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
  std::string error;
  ASSERT_TRUE(daemon.startWrapped({}, {}, {"--log-level", "info", "--virtual-gpus-per-gpu", "2"}, &error)) << error;
  const std::map<std::string, std::string> driver = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("placed", r, 2, {"fake_cuda_hold"}, driver));
  ASSERT_TRUE(allSay(ranks, "holding")) << daemon.log();
  Process ctl = Process::spawn({runfile("tools/gradsyncctl/gradsyncctl"), "--socket", daemon.socketPath(), "jobs"}, {},
                               daemon.dir() + "/jobs.log");
  EXPECT_EQ(ctl.wait(std::chrono::seconds(20)), 0) << ctl.log();
  const std::string jobs = ctl.log();
  // Rows "RANK LOCAL PID HOST CONNECTED JOINED ARENA GPU GPU-BUFFERS".
  for (int r = 0; r < 2; ++r) {
    const std::regex row("\\n +" + std::to_string(r) + " +[0-9]+ +[0-9]+ .* " + std::to_string(r) +
                         " \\(GPU-fa4e0000-0000-0000-0000-000000000001\\) +1\\n");
    EXPECT_TRUE(std::regex_search(jobs, row)) << "rank " << r << " in\n" << jobs;
  }
  for (auto& rank : ranks) rank.kill(SIGKILL);
  for (auto& rank : ranks) rank.wait(kTimeout);
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

// A shutdown that cannot finish (a job's GPU stream never drains) ends at
// a second SIGTERM at once, with exit code 1 and the reason in the log,
// not after the 30 s limit.
TEST(FakeGpuShutdownTest, ASecondSignalEndsAShutdownThatDoesNotFinish) {
  DaemonFixture daemon;
  daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
  std::string error;
  ASSERT_TRUE(
      daemon.startWrapped({}, {{"GRADSYNC_FAKE_GPU_STREAMS_NEVER_DRAIN", "1"}}, {"--log-level", "info"}, &error))
      << error;
  const std::map<std::string, std::string> driver = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("hold", r, 2, {"fake_cuda_hold"}, driver));
  for (auto& rank : ranks) {
    ASSERT_TRUE(waitFor([&] { return rank.log().find("holding") != std::string::npos || !rank.running(); },
                        scaled(std::chrono::seconds(30))))
        << rank.log() << daemon.log();
    ASSERT_TRUE(rank.running()) << rank.log();
  }
  daemon.process().kill(SIGTERM);
  // The shutdown reaches the job's stream and stays there.
  ASSERT_TRUE(
      waitFor([&] { return daemon.log().find("never drains") != std::string::npos; }, scaled(std::chrono::seconds(10))))
      << daemon.log();
  EXPECT_TRUE(daemon.process().running()) << daemon.log();
  daemon.process().kill(SIGTERM);
  EXPECT_EQ(daemon.waitForExit(scaled(std::chrono::seconds(5))), 1) << daemon.log();  // not the 30 s limit
  EXPECT_NE(daemon.log().find("received signal 15 while shutting down; exiting now"), std::string::npos)
      << daemon.log();
}

// Two fake-GPU daemons for CUDA jobs across nodes; `env[i]` for daemon i.
struct DaemonPair {
  std::vector<std::unique_ptr<DaemonFixture>> daemons;
  std::string leader;  // the leader's peer address

  bool start(const std::string& cross_node, const std::vector<std::map<std::string, std::string>>& env,
             std::string* error, const std::vector<std::string>& flags = {}) {
    for (size_t i = 0; i < 2; ++i) {
      daemons.push_back(std::make_unique<DaemonFixture>());
      daemons.back()->useBinary("tests/fakegpu/gradsyncd_fakegpu");
      std::vector<std::string> args = {"--peer-address", "127.0.0.1:0", "--gpu-cross-node", cross_node};
      args.insert(args.end(), flags.begin(), flags.end());
      if (!daemons.back()->startWrapped({}, env[i], args, error)) {
        return false;
      }
    }
    std::smatch match;
    const std::string log = daemons[0]->log();
    if (!std::regex_search(log, match, std::regex("peer service on ([0-9.]+:[0-9]+)"))) {
      *error = "no peer address in the leader's log:\n" + log;
      return false;
    }
    leader = match[1].str();
    return true;
  }
  // Rank r on daemon placement[r] (by default ranks 0 and 1 on the
  // leader's node, rank 2 on the other), running the worker's scenario
  // `args`.
  std::vector<Process> spawn(const std::string& job, const std::vector<std::string>& args,
                             const std::vector<int>& placement = {0, 0, 1},
                             const std::map<std::string, std::string>& extra_env = {}) {
    const int size = static_cast<int>(placement.size());
    std::vector<Process> ranks;
    for (int r = 0; r < size; ++r) {
      const int node = placement[r];
      int local_rank = 0, local_size = 0;
      for (int other = 0; other < size; ++other) {
        if (placement[other] != node) continue;
        if (other < r) ++local_rank;
        ++local_size;
      }
      auto env = daemons[node]->rankEnv(job, r, size);
      env["GRADSYNC_LOCAL_RANK"] = std::to_string(local_rank);
      env["GRADSYNC_LOCAL_SIZE"] = std::to_string(local_size);
      env["GRADSYNC_LEADER"] = leader;
      env["GRADSYNC_TEST_FAKE_LIBCUDA"] = runfile("tests/fakegpu/libcuda.so.1");
      for (const auto& [key, value] : extra_env) env[key] = value;
      ranks.push_back(daemons[node]->spawnRank(job, r, size, args, env));
    }
    return ranks;
  }
  std::string logs() const { return "--- leader:\n" + daemons[0]->log() + "--- follower:\n" + daemons[1]->log(); }
};

// Across two daemons over NCCL, the job's timeline (rank 0's daemon
// records it, as Horovod's rank 0 does): the reduction, NCCL among the
// daemons, the copies back.
TEST(FakeGpuTimelineAcrossDaemonsTest, TheTimelineHoldsTheGpuPhasesOverNcclAmongTheDaemons) {
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), fakeNccl()}, &error)) << error;
  const std::string path = timelinePath("across_timeline.json");
  std::vector<Process> ranks = pair.spawn("timed", {"fake_cuda_across", "3"}, {0, 0, 1}, {{"GRADSYNC_TIMELINE", path}});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
  expectGpuPhases(path, {"GPU_REDUCE", "GPU_NCCL_ALLREDUCE", "GPU_COPY"});
  for (auto& d : pair.daemons) {
    EXPECT_NE(d->log().find("NCCL communicator among 2 daemons formed"), std::string::npos) << d->log();
    EXPECT_EQ(d->stop(), 0) << d->log();
  }
}

// Adasum of CUDA tensors through host memory: 4 ranks over 2 fake GPUs of
// one daemon, then 2 daemons of 2 GPUs with 2 ranks each; the result equals
// the CPU path's bit for bit.
TEST(FakeGpuAdasumTest, AdasumOfCudaTensorsEqualsTheCpuPath) {
  {
    DaemonFixture daemon;
    daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
    std::string error;
    ASSERT_TRUE(daemon.startWrapped({}, {{"GRADSYNC_FAKE_GPUS", "2"}}, {}, &error)) << error;
    const std::map<std::string, std::string> driver = {
        {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
    std::vector<Process> ranks;
    for (int r = 0; r < 4; ++r) ranks.push_back(daemon.spawnRank("adasum", r, 4, {"fake_cuda_adasum", "2"}, driver));
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon.log();
    EXPECT_EQ(daemon.stop(), 0) << daemon.log();
  }
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_GPUS"] = "2";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {env, env}, &error)) << error;
  std::vector<Process> ranks = pair.spawn("adasum", {"fake_cuda_adasum", "2"}, {0, 0, 1, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

// Two daemons over host-memory GPUs: CUDA tensors between them. With
// "staging" they go through host memory and the UCX ring; with "auto" the
// daemons first try NCCL among their GPUs, which cannot form here (no
// device), and fall back to the same staging together; with "nccl" they load
// the stand-in NCCL (tests/fakenccl) and allreduce and broadcast through it.
// Six steps of the same collectives, each step's tensors elsewhere in
// device memory.
class FakeGpuAcrossDaemonsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FakeGpuAcrossDaemonsTest, AllreduceAndBroadcastBetweenDaemons) {
  const bool nccl = GetParam() == "nccl";
  const std::map<std::string, std::string> env = nccl ? fakeNccl() : std::map<std::string, std::string>{};
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start(nccl ? "auto" : GetParam(), {env, env}, &error)) << error;
  auto& daemons = pair.daemons;
  std::vector<Process> ranks = pair.spawn("across", {"fake_cuda_across", "6"});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
  // After the first step the CUDA collectives (allreduces and broadcasts)
  // repeat from the response cache (each step's device references its
  // own), after rounds among the daemons, not through the leader.
  std::smatch ended;
  const std::regex end_line(
      "job 'across' ended: .* ([0-9]+) steady-state rounds, [0-9]+ messages sent in them, ([0-9]+) collectives run "
      "after them");
  std::string log;
  ASSERT_TRUE(waitFor(
      [&] {
        log = daemons[0]->log();
        return std::regex_search(log, ended, end_line);
      },
      std::chrono::seconds(10)))
      << log;
  std::printf("%s\n", ended[0].str().c_str());
  EXPECT_GT(std::stoi(ended[1]), 0) << log;
  EXPECT_GE(std::stoi(ended[2]), 10) << log;
  if (GetParam() == "auto") {
    for (auto& d : daemons) {  // both tried NCCL (the leader's id reached them) and fell back
      EXPECT_NE(d->log().find("no NCCL among the daemons"), std::string::npos) << d->log();
    }
  }
  if (nccl) {
    for (auto& d : daemons) {
      EXPECT_NE(d->log().find("NCCL communicator among 2 daemons formed"), std::string::npos) << d->log();
      EXPECT_EQ(d->log().find("no NCCL among the daemons"), std::string::npos) << d->log();
    }
  }
  for (auto& d : daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

INSTANTIATE_TEST_SUITE_P(Transports, FakeGpuAcrossDaemonsTest, ::testing::Values("staging", "auto", "nccl"));

// Every GPU of a node: one daemon with 4 fake GPUs, its ranks spread over
// them (one per GPU, or two per GPU on 2), each GPU's ranks reduced there
// and the GPUs combined through the stand-in NCCL (host memory for int16,
// which NCCL lacks); without NCCL, through host memory for every dtype.
// With `virtual_per_gpu`, the daemon has `gpus` fake GPUs, each presented
// as that many (--virtual-gpus-per-gpu): rank r on the (r mod it)-th.
struct GpusCase {
  int ranks;
  int gpus;  // the ranks use these many of the daemon's 4
  bool nccl;
  int virtual_per_gpu = 0;
};

class FakeGpusOfANodeTest : public ::testing::TestWithParam<GpusCase> {
 protected:
  void SetUp() override {
    const GpusCase c = GetParam();
    daemon_.useBinary("tests/fakegpu/gradsyncd_fakegpu");
    std::map<std::string, std::string> env = c.nccl ? fakeNccl() : std::map<std::string, std::string>{};
    env["GRADSYNC_FAKE_GPUS"] = c.virtual_per_gpu > 0 ? std::to_string(c.gpus) : "4";
    std::vector<std::string> flags = {"--log-level", "info"};
    if (c.virtual_per_gpu > 0) {
      flags.insert(flags.end(), {"--virtual-gpus-per-gpu", std::to_string(c.virtual_per_gpu)});
    }
    std::string error;
    ASSERT_TRUE(daemon_.startWrapped({}, env, flags, &error)) << error;
  }
  // Runs the job `args` on c.ranks ranks; every rank must succeed, and with
  // NCCL the GPUs must have been combined through it.
  void runJob(const std::vector<std::string>& args) {
    const GpusCase c = GetParam();
    const std::map<std::string, std::string> driver = {
        {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
    std::vector<Process> ranks;
    for (int r = 0; r < c.ranks; ++r) ranks.push_back(daemon_.spawnRank("gpus", r, c.ranks, args, driver));
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon_.log();
    const std::string log = daemon_.log();
    std::string devices;
    const int used = c.virtual_per_gpu > 0 ? std::min(c.ranks, c.gpus * c.virtual_per_gpu) : c.gpus;
    for (int d = 0; d < used; ++d) devices += (d == 0 ? "" : ", ") + std::to_string(d);
    if (c.virtual_per_gpu > 0) {
      EXPECT_NE(log.find("(virtual GPU " + std::to_string(c.virtual_per_gpu) + " of " +
                         std::to_string(c.virtual_per_gpu) + " on device 0)"),
                std::string::npos)
          << log;
    }
    if (c.nccl) {
      EXPECT_NE(log.find("NCCL communicator over this node's GPUs " + devices + " formed"), std::string::npos) << log;
      EXPECT_EQ(log.find("no NCCL over this node's GPUs"), std::string::npos) << log;
    }  // else the build's NCCL, which cannot form without a GPU, or none: host memory either way
  }
  void TearDown() override { EXPECT_EQ(daemon_.stop(), 0) << daemon_.log(); }
  DaemonFixture daemon_;
};

TEST_P(FakeGpusOfANodeTest, AllreduceAndBroadcastAcrossTheNodesGpus) {
  runJob({"fake_cuda_gpus", std::to_string(GetParam().gpus), "4"});
}

// Every collective (ragged and empty allgather, alltoall, reducescatter of
// uneven rows) with each rank's tensors on its GPU: each GPU's block of
// inputs gathered on every GPU, or the GPUs' sums allreduced.
TEST_P(FakeGpusOfANodeTest, EveryCollectiveAcrossTheNodesGpus) {
  runJob({"fake_cuda", "gpus", std::to_string(GetParam().gpus)});
}

// The same on cudaMallocAsync memory: each rank's staging buffers on its
// own GPU.
TEST_P(FakeGpusOfANodeTest, EveryCollectiveOnPoolMemoryAcrossTheNodesGpus) {
  runJob({"fake_cuda", "pool", std::to_string(GetParam().gpus)});
}

// Process sets on a node's GPUs: sets {0, 1} and {2, 3} on 4 GPUs,
// alternating with the whole job for 5 steps; the daemon keeps one NCCL
// communicator per set of GPUs: 4 + 2 + 2 ranks initialized in all, not
// again at every switch.
TEST(FakeGpusProcessSetsTest, EachSetOfGpusFormsItsCommunicatorOnce) {
  DaemonFixture daemon;
  daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_GPUS"] = "4";
  env["GRADSYNC_FAKE_NCCL_VERBOSE"] = "1";
  std::string error;
  ASSERT_TRUE(daemon.startWrapped({}, env, {"--log-level", "info"}, &error)) << error;
  const std::map<std::string, std::string> driver = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  std::vector<Process> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(daemon.spawnRank("sets", r, 4, {"fake_cuda_sets", "4", "5"}, driver));
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << daemon.log();
  const std::string log = daemon.log();
  std::map<std::string, int> initialized;  // "rank R of N" -> times
  const std::regex line("fake NCCL: (rank [0-9]+ of [0-9]+) initialized");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    ++initialized[(*it)[1].str()];
  }
  const std::map<std::string, int> once = {{"rank 0 of 4", 1}, {"rank 1 of 4", 1},
                                           {"rank 2 of 4", 1}, {"rank 3 of 4", 1},
                                           {"rank 0 of 2", 2}, {"rank 1 of 2", 2}};  // one communicator per set
  EXPECT_EQ(initialized, once) << log;
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

// An NCCL failure over the node's GPUs: every rank gets an error naming it
// within seconds, and the daemon runs the next job (a new communicator).
TEST(FakeGpusOfANodeFailureTest, AnNcclFailureIsNamedOnEveryRankAndTheNextJobRuns) {
  DaemonFixture daemon;
  daemon.useBinary("tests/fakegpu/gradsyncd_fakegpu");
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_GPUS"] = "2";
  env["GRADSYNC_FAKE_NCCL_FAIL_AT"] = "2";  // the daemon's second NCCL call
  std::string error;
  ASSERT_TRUE(daemon.startWrapped({}, env, {"--log-level", "info"}, &error)) << error;
  const std::map<std::string, std::string> driver = {
      {"GRADSYNC_TEST_FAKE_LIBCUDA", runfile("tests/fakegpu/libcuda.so.1")}};
  const std::vector<std::string> args = {"fake_cuda_gpus", "2", "3"};
  const auto start = std::chrono::steady_clock::now();
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(daemon.spawnRank("fails", r, 2, args, driver));
  for (auto& rank : ranks) {
    EXPECT_NE(rank.wait(kTimeout), 0) << rank.log();
    EXPECT_NE(rank.log().find("ncclAllReduce over this node's GPUs"), std::string::npos) << rank.log() << daemon.log();
    EXPECT_NE(rank.log().find("injected failure of call 2"), std::string::npos) << rank.log();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << daemon.log();
  std::vector<Process> next;
  for (int r = 0; r < 2; ++r) next.push_back(daemon.spawnRank("after", r, 2, args, driver));
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << daemon.log();
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

INSTANTIATE_TEST_SUITE_P(Placements, FakeGpusOfANodeTest,
                         ::testing::Values(GpusCase{4, 4, true}, GpusCase{4, 2, true}, GpusCase{3, 2, false},
                                           // Uneven: 3 ranks on one GPU, 2 on the other.
                                           GpusCase{5, 2, true},
                                           // One GPU as 4 virtual ones, 4 ranks: one on each.
                                           GpusCase{4, 1, true, 4}));

// Nodes of one or several GPUs: two daemons of 1 or 2 fake GPUs each, two
// ranks on each, one per GPU or both on the one. Allreduce: each node's GPUs
// combine over NCCL (or host memory), the first GPU's buffer goes among the
// daemons (NCCL or the ring), then back to the other GPU and every rank.
// Broadcast: from the root's GPU to its node's first GPU, among the nodes,
// to the other GPUs. Allgather, alltoall, reducescatter: over NCCL among
// the daemons (each call of the stand-in counted), or every GPU's ranks
// through host memory.
struct NodesCase {
  int gpus;
  bool nccl;
};

class FakeGpusAcrossDaemonsTest : public ::testing::TestWithParam<NodesCase> {
 protected:
  void runJob(const std::string& scenario, const std::vector<std::string>& args) {
    const NodesCase c = GetParam();
    std::map<std::string, std::string> env = c.nccl ? fakeNccl() : std::map<std::string, std::string>{};
    env["GRADSYNC_FAKE_GPUS"] = std::to_string(c.gpus);
    if (c.nccl) env["GRADSYNC_FAKE_NCCL_VERBOSE"] = "2";
    DaemonPair pair;
    std::string error;
    ASSERT_TRUE(pair.start(c.nccl ? "auto" : "staging", {env, env}, &error)) << error;
    std::vector<std::string> command = {scenario};
    if (scenario == "fake_cuda") command.push_back("gpus");
    command.push_back(std::to_string(c.gpus));
    command.insert(command.end(), args.begin(), args.end());
    std::vector<Process> ranks = pair.spawn("nodes", command, {0, 0, 1, 1});
    std::string report;
    EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
    for (auto& d : pair.daemons) {
      const std::string log = d->log();
      if (c.nccl) {
        if (c.gpus > 1) EXPECT_NE(log.find("NCCL communicator over this node's GPUs 0, 1 formed"), std::string::npos);
        EXPECT_NE(log.find("NCCL communicator among 2 daemons formed"), std::string::npos) << log;
        for (const char* call : {"of 2: allreduce", "of 2: broadcast"}) {
          EXPECT_NE(log.find(call), std::string::npos) << call << "\n" << log;
        }
        if (scenario == "fake_cuda") {  // among the daemons (2 ranks; over the GPUs too with 2 of them)
          for (const char* call : {"of 2: allgather", "of 2: send/receive"}) {
            EXPECT_NE(log.find(call), std::string::npos) << call << "\n" << log;
          }
        }
      }
      EXPECT_EQ(d->stop(), 0) << d->log();
    }
  }
};

TEST_P(FakeGpusAcrossDaemonsTest, FusedCollectivesAcrossNodes) { runJob("fake_cuda_gpus", {"4"}); }

TEST_P(FakeGpusAcrossDaemonsTest, EveryCollectiveAcrossNodes) { runJob("fake_cuda", {}); }

// The daemons' communicator formed on GPU 1 (by a process set's allreduce
// there), then every collective of the whole job over GPUs 0 and 1.
TEST(FakeGpusLeadTest, TheDaemonsCommunicatorsGpuLeadsWhereverItFormed) {
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_GPUS"] = "2";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {env, env}, &error)) << error;
  std::vector<Process> ranks = pair.spawn("lead", {"fake_cuda_lead"}, {0, 0, 1, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
  for (auto& d : pair.daemons) {
    const std::regex formed("NCCL communicator among 2 daemons formed \\(this node rank [01], GPU 1; epoch 1\\)");
    EXPECT_TRUE(std::regex_search(d->log(), formed)) << d->log();
    EXPECT_EQ(d->stop(), 0) << d->log();
  }
}

// Process sets across two daemons over NCCL: sets {0, 1} and {2, 3} of 4
// ranks alternate with the whole job (allreduce, broadcast, allgather).
// Placed 0, 0, 1, 1 each set lives on one node (the other is outside it);
// placed 0, 1, 0, 1 each spans both. Every daemon splits the job's
// communicator once per set (ncclCommSplit), and each set's collectives go
// over its split.
class FakeGpuSetsAcrossDaemonsTest : public ::testing::TestWithParam<std::vector<int>> {};

TEST_P(FakeGpuSetsAcrossDaemonsTest, EachSetGoesOverASplitOfTheJobsCommunicator) {
  const std::vector<int> placement = GetParam();
  std::map<std::string, std::string> env = fakeNccl();
  env["GRADSYNC_FAKE_NCCL_VERBOSE"] = "2";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {env, env}, &error)) << error;
  std::vector<Process> ranks = pair.spawn("sets", {"fake_cuda_sets", "1", "4"}, placement);
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << pair.logs();
  const bool spanning = placement[1] != placement[0];
  const std::regex formed("NCCL communicator of process set [0-9]+ among its daemons formed \\(([0-9]+) daemons\\)");
  for (auto& d : pair.daemons) {
    const std::string log = d->log();
    int splits = 0;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), formed); it != std::sregex_iterator(); ++it) {
      ++splits;
      EXPECT_EQ((*it)[1].str(), spanning ? "2" : "1") << log;
    }
    EXPECT_EQ(splits, spanning ? 2 : 1) << log;  // one per set this node is in, once
    if (spanning) EXPECT_NE(log.find("of 2: allgather"), std::string::npos) << log;
    EXPECT_EQ(d->stop(), 0) << d->log();
  }
}

// A split that fails (on the follower, asynchronously): the set's collective
// fails on both daemons within seconds, naming ncclCommSplit, the job's
// ranks all end with an error, and the next job splits and runs. Without
// steady-state rounds: after the failed set's ranks leave, a round in
// flight waits for the transfer timeout (a gap of the rounds, stated in
// docs/status.md).
TEST(FakeGpuSetsSplitFailureTest, AFailedSplitIsNamedAndTheNextJobRuns) {
  auto failing = fakeNccl();
  failing["GRADSYNC_FAKE_NCCL_FAIL_SPLIT"] = "1";  // the follower's first split
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), failing}, &error, {"--steady-state", "leader"})) << error;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Process> ranks = pair.spawn("fails", {"fake_cuda_sets", "1", "4"}, {0, 1, 0, 1});
  int named = 0, cause = 0;
  for (auto& rank : ranks) {
    EXPECT_NE(rank.wait(kTimeout), 0) << rank.log();
    named += std::regex_search(rank.log(), std::regex("of process set [0-9]+: ncclCommSplit among the daemons"));
    cause += rank.log().find("injected failure of ncclCommSplit") != std::string::npos;
  }
  EXPECT_GE(named, 2) << pair.logs();  // the two ranks of the set whose split failed
  EXPECT_GE(cause, 1) << pair.logs();  // one of them on the follower
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << pair.logs();
  std::vector<Process> next = pair.spawn("after", {"fake_cuda_sets", "1", "4"}, {0, 1, 0, 1});
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

INSTANTIATE_TEST_SUITE_P(Placements, FakeGpuSetsAcrossDaemonsTest,
                         ::testing::Values(std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 0, 1}),
                         [](const ::testing::TestParamInfo<std::vector<int>>& info) {
                           return info.param[1] == info.param[0] ? std::string("SetPerNode") : std::string("Spanning");
                         });

INSTANTIATE_TEST_SUITE_P(GpusAndNccl, FakeGpusAcrossDaemonsTest,
                         ::testing::Values(NodesCase{2, true}, NodesCase{2, false}, NodesCase{1, true}),
                         [](const ::testing::TestParamInfo<NodesCase>& info) {
                           return std::to_string(info.param.gpus) + "Gpus" + (info.param.nccl ? "Nccl" : "Staging");
                         });

long long unixMsNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The Unix milliseconds a rank printed with "RECOVERED epoch E at MS" (0:
// none).
long long recoveredAt(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("RECOVERED epoch [0-9]+ at ([0-9]+)")) ? std::stoll(m[1].str()) : 0;
}

// Each daemon formed the communicator among the daemons in epoch 1 and
// again in a later one, and ran allreduces over them; then stops cleanly.
void expectCommunicatorsPerEpoch(DaemonPair& pair) {
  for (auto& d : pair.daemons) {
    const std::string log = d->log();
    EXPECT_TRUE(std::regex_search(log, std::regex("NCCL communicator among 2 daemons formed .*; epoch 1\\)"))) << log;
    EXPECT_TRUE(std::regex_search(log, std::regex("NCCL communicator among 2 daemons formed .*; epoch [2-9]\\)")))
        << log;
    EXPECT_NE(log.find("of 2: allreduce"), std::string::npos) << log;
    EXPECT_EQ(d->stop(), 0) << d->log();
  }
}

// Elastic jobs of CUDA tensors across daemons: NCCL among the daemons,
// with a communicator per epoch (a new id from the leader with each). Rank
// 2 dies (SIGKILL) while CUDA allreduces run; the survivors rejoin at size
// 2 and go on, over the communicator of epoch 2 (each step's sum checked).
TEST(FakeGpuElasticTest, ARankKilledTheSurvivorsGoOnWithCudaTensors) {
  auto env = fakeNccl();
  env["GRADSYNC_FAKE_NCCL_VERBOSE"] = "2";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {env, env}, &error)) << error;
  std::vector<Process> ranks = pair.spawn("elastic", {"elastic_cuda_loop", "1", "10", "0", "plain", "2"}, {0, 1, 1},
                                          {{"GRADSYNC_ELASTIC", "1"}, {"GRADSYNC_MIN_SIZE", "2"}});
  ASSERT_TRUE(allSay(ranks, "LOOPING")) << pair.logs();
  ranks[2].kill(SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].wait(kTimeout), 0) << "rank " << r << ":\n" << ranks[r].log() << pair.logs();
    EXPECT_NE(ranks[r].log().find("RECOVERED epoch 2"), std::string::npos) << ranks[r].log();
  }
  expectCommunicatorsPerEpoch(pair);
}

// The daemons wait in NCCL when the epoch ends: the follower's fifth NCCL
// call stalls (as a kernel whose peer never comes), so both daemons wait in
// the same allreduce; then rank 2 dies. The new epoch ends both waits at
// once (the communicator aborted), far sooner than the 10 s limit of an NCCL
// call, and the survivors go on over the next epoch's communicator.
TEST(FakeGpuElasticTest, ANewEpochEndsAWaitInNccl) {
  auto env = fakeNccl();
  env["GRADSYNC_FAKE_NCCL_VERBOSE"] = "2";
  auto stalling = env;
  stalling["GRADSYNC_FAKE_NCCL_STALL_AT"] = "5";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {env, stalling}, &error)) << error;
  std::vector<Process> ranks = pair.spawn("elastic", {"elastic_cuda_loop", "1", "10", "0", "plain", "2"}, {0, 1, 1},
                                          {{"GRADSYNC_ELASTIC", "1"}, {"GRADSYNC_MIN_SIZE", "2"}});
  ASSERT_TRUE(waitFor([&] { return pair.daemons[1]->log().find("stalls until aborted") != std::string::npos; },
                      std::chrono::seconds(30)))
      << pair.logs();
  const long long killed_at = unixMsNow();
  ranks[2].kill(SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].wait(kTimeout), 0) << "rank " << r << ":\n" << ranks[r].log() << pair.logs();
    const std::string log = ranks[r].log();
    EXPECT_NE(log.find("RECOVERED epoch 2"), std::string::npos) << log;
    EXPECT_LT(recoveredAt(log) - killed_at, 5000) << log << pair.logs();
  }
  // The follower's stalled allreduce ended, and so did the leader's if it
  // had reached it: the first daemon to see the new epoch aborted its
  // communicator naming the cause, which ended the other's wait too if it
  // had not seen the epoch yet.
  EXPECT_NE(pair.daemons[1]->log().find("NCCL among the daemons failed in epoch 1 (ncclAllReduce among the daemons"),
            std::string::npos)
      << pair.logs();
  int interrupted = 0;
  for (auto& d : pair.daemons) {
    const std::string log = d->log();
    interrupted += log.find(
                       "job 'elastic': the membership changed (epoch 1 is over, the job is at epoch 2); the "
                       "communicator was aborted") != std::string::npos;
  }
  EXPECT_GE(interrupted, 1) << pair.logs();
  expectCommunicatorsPerEpoch(pair);
}

// An NCCL failure on one node (asynchronous, as a network error): every rank
// of the job gets an error naming NCCL and the cause, within seconds; the
// daemons then run the next job, through a new communicator.
TEST(FakeGpuNcclFailureTest, EveryRankNamesTheFailureAndTheNextJobRuns) {
  auto failing = fakeNccl();
  failing["GRADSYNC_FAKE_NCCL_FAIL_AT"] = "3";  // the follower's third NCCL call
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), failing}, &error)) << error;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Process> ranks = pair.spawn("fails", {"fake_cuda_across", "6"});
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(ranks[r].wait(kTimeout), 0) << ranks[r].log();
    EXPECT_NE(ranks[r].log().find("ncclAllReduce among the daemons"), std::string::npos)
        << ranks[r].log() << pair.logs();
    // The follower's rank learns the cause; the leader's, that the other node failed.
    EXPECT_NE(ranks[r].log().find(r == 2 ? "injected failure of call 3" : "another rank failed or aborted"),
              std::string::npos)
        << ranks[r].log();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << pair.logs();
  std::vector<Process> next = pair.spawn("after", {"fake_cuda_across", "3"});
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

// A daemon whose own part of a collective fails before its step among the
// daemons (its GPU reduction, injected on the follower) does not leave the
// leader waiting in NCCL for the call it will not make: every rank of the
// job ends within seconds, the leader's named by the follower's host and
// cause.
TEST(FakeGpuLocalFailureTest, ANodeWhosePartFailsTellsItsPeersAtOnce) {
  auto failing = fakeNccl();
  failing["GRADSYNC_FAKE_GPU_FAIL_REDUCE_AT"] = "3";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), failing}, &error)) << error;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Process> ranks = pair.spawn("fails", {"fake_cuda_across", "6"});
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(ranks[r].wait(kTimeout), 0) << ranks[r].log();
    EXPECT_NE(ranks[r].log().find("injected failure of reduction 3"), std::string::npos)
        << ranks[r].log() << pair.logs();
  }
  for (int r = 0; r < 2; ++r) {  // the leader's
    EXPECT_NE(ranks[r].log().find("could not take its part: batch "), std::string::npos) << ranks[r].log();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

// The same in an elastic job whose ranks stay after the error (as ranks
// that restore their state would): no rank leaves, so no new epoch ends the
// leader's wait in NCCL. Once the silence limit (6 s) has passed without
// one, the follower fails the job by name, and the leader's rank hears it
// then (not after NCCL's own 10 s limit and the ring's wait for a cause).
TEST(FakeGpuLocalFailureTest, AnElasticJobWhoseRanksStayEndsThePeersWaitsToo) {
  auto failing = fakeNccl();
  failing["GRADSYNC_FAKE_GPU_FAIL_REDUCE_AT"] = "3";
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), failing}, &error)) << error;
  std::vector<Process> ranks =
      pair.spawn("elastic-stays", {"elastic_cuda_loop", "1", "10", "0", "plain", "2"}, {0, 1, 1},
                 {{"GRADSYNC_ELASTIC", "1"}, {"GRADSYNC_MIN_SIZE", "2"}, {"GRADSYNC_WORKER_LINGER_SECONDS", "12"}});
  std::vector<long long> failed_at(3, -1);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(ranks[r].wait(kTimeout), 0) << ranks[r].log();
    std::smatch m;
    const std::string log = ranks[r].log();
    if (std::regex_search(log, m, std::regex("failed at ([0-9]+)"))) failed_at[r] = std::stoll(m[1]);
  }
  EXPECT_NE(ranks[1].log().find("injected failure of reduction 3"), std::string::npos) << ranks[1].log();
  EXPECT_NE(ranks[0].log().find("could not take its part: batch "), std::string::npos) << ranks[0].log() << pair.logs();
  ASSERT_GT(failed_at[0], 0) << ranks[0].log();
  ASSERT_GT(failed_at[1], 0) << ranks[1].log();
  EXPECT_LT(failed_at[0] - failed_at[1], 9000) << ranks[0].log() << ranks[1].log() << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

// The same when the failing call is an alltoall's sends and receives or an
// allgather among the daemons.
class FakeGpuNcclExchangeFailureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FakeGpuNcclExchangeFailureTest, EveryRankNamesTheFailureAndTheNextJobRuns) {
  auto failing = fakeNccl();
  failing["GRADSYNC_FAKE_NCCL_FAIL_AT"] = "1";  // the follower's first NCCL call
  DaemonPair pair;
  std::string error;
  ASSERT_TRUE(pair.start("auto", {fakeNccl(), failing}, &error)) << error;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Process> ranks = pair.spawn("fails", {"fake_cuda_exchange", GetParam()});
  const std::string call =
      GetParam() == "alltoall" ? "ncclSend/ncclRecv among the daemons" : "ncclAllGather among the daemons";
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(ranks[r].wait(kTimeout), 0) << ranks[r].log();
    EXPECT_NE(ranks[r].log().find(call), std::string::npos) << ranks[r].log() << pair.logs();
    EXPECT_NE(ranks[r].log().find(r == 2 ? "injected failure of call 1" : "another rank failed or aborted"),
              std::string::npos)
        << ranks[r].log();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << pair.logs();
  std::vector<Process> next = pair.spawn("after", {"fake_cuda_exchange", GetParam()});
  std::string report;
  EXPECT_TRUE(allSucceed(next, kTimeout, &report)) << report << pair.logs();
  for (auto& d : pair.daemons) EXPECT_EQ(d->stop(), 0) << d->log();
}

INSTANTIATE_TEST_SUITE_P(Calls, FakeGpuNcclExchangeFailureTest, ::testing::Values("alltoall", "allgather"));

}  // namespace
}  // namespace gradsync::testutil
