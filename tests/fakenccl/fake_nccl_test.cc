// SPDX-License-Identifier: Apache-2.0
// The stand-in NCCL through the daemon's own loader and communicator: ranks
// on threads (as daemons would be processes), several ranks in one thread
// with grouped calls (as a daemon holding every GPU of its node), and an
// abort that every other rank sees at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "daemon/gpu/fake_device_ops.h"
#include "daemon/gpu/nccl_comm.h"
#include "tests/testutil/process.h"

namespace gradsync::gpu {
namespace {

using ::testing::HasSubstr;

constexpr auto kLimit = std::chrono::seconds(10);

std::unique_ptr<NcclLibrary> load() {
  auto nccl = NcclLibrary::load(testutil::runfile("tests/fakenccl/libnccl.so.2"));
  EXPECT_TRUE(nccl.isOk()) << nccl.status().toString();
  return nccl.isOk() ? std::move(nccl).value() : nullptr;
}

// Runs `body` for each of `ranks` ranks on its own thread (as daemons would
// be processes), each with its rank of a new communicator among them;
// returns what each rank put in `error` ("" when nothing went wrong).
std::vector<std::string> onDaemonRanks(const NcclLibrary& nccl, int ranks,
                                       const std::function<void(int, NcclComm&, std::string&)>& body) {
  auto id = nccl.uniqueId();
  std::vector<std::string> errors(ranks, id.isOk() ? "" : id.status().toString());
  if (!id.isOk()) return errors;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      FakeDeviceOps ops;
      auto comm = NcclComm::create(nccl, &ops, *id, ranks, r, {0}, "among the daemons", kLimit);
      if (!comm.isOk()) {
        errors[r] = comm.status().toString();
        return;
      }
      body(r, **comm, errors[r]);
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(FakeNccl, LoadsAsNcclAndRanksOnThreadsAllreduceAndBroadcast) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->version(), 23007);
  constexpr int kRanks = 3;
  const std::vector<std::string> errors = onDaemonRanks(*nccl, kRanks, [&](int r, NcclComm& comm, std::string& error) {
    for (int step = 0; step < 20; ++step) {  // the next call reuses the areas: readers first
      std::vector<float> x(1000);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + i + step);
      Status s = comm.allReduce({x.data()}, x.size(), v1::FLOAT32, v1::SUM, {nullptr}, kLimit);
      if (!s.isOk() || x[7] != static_cast<float>(0 + 1 + 2 + 3 * (7 + step))) {
        error = "allreduce step " + std::to_string(step) + ": " + s.toString() + " " + std::to_string(x[7]);
        return;
      }
    }
    std::vector<int64_t> m = {r * 10, -r};
    Status s = comm.allReduce({m.data()}, m.size(), v1::INT64, v1::MAX, {nullptr}, kLimit);
    if (!s.isOk() || m[0] != 20 || m[1] != 0) error = "max: " + s.toString();
    std::string text = r == 2 ? "from rank two" : "-------------";
    s = comm.broadcast({text.data()}, text.size(), 2, {nullptr}, kLimit);
    if (!s.isOk() || text != "from rank two") error = "broadcast: " + s.toString() + " " + text;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Rank r sends r + 1 + p bytes of value 10r + p to each peer p, except that
// rank 0 sends nothing to rank 2 (and rank 2 expects nothing from it), for
// several rounds: the mailboxes are reused once taken.
TEST(FakeNccl, ExchangesThroughSendAndReceive) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  constexpr int kRanks = 3;
  const auto length = [](int from, int to) -> size_t { return from == 0 && to == 2 ? 0 : from + 1 + to; };
  const std::vector<std::string> errors = onDaemonRanks(*nccl, kRanks, [&](int r, NcclComm& comm, std::string& error) {
    for (int round = 0; round < 5; ++round) {
      std::vector<uint8_t> send, recv(64, 0xff);
      std::vector<NcclComm::PeerBytes> send_to(kRanks), recv_from(kRanks);
      size_t at = 0;
      for (int p = 0; p < kRanks; ++p) {
        if (p == r) continue;
        send_to[p] = {send.size(), length(r, p)};
        send.insert(send.end(), length(r, p), static_cast<uint8_t>(10 * r + p + round));
        recv_from[p] = {at, length(p, r)};
        at += length(p, r);
      }
      Status s = comm.exchange(send.data(), send_to, recv.data(), recv_from, nullptr, kLimit);
      for (int p = 0; s.isOk() && p < kRanks; ++p) {
        for (size_t i = 0; p != r && i < length(p, r); ++i) {
          if (recv[recv_from[p].offset + i] != 10 * p + r + round)
            s = internalError("wrong byte from " + std::to_string(p));
        }
      }
      if (!s.isOk()) {
        error = "round " + std::to_string(round) + ": " + s.toString();
        return;
      }
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Ranks 0 and 2 of 3 split off a communicator (new ranks 0 and 1, by key),
// rank 1 stays out; the new one and the parent both go on working.
TEST(FakeNccl, SplitsACommunicatorForSomeRanks) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  constexpr int kRanks = 3;
  const std::vector<std::string> errors = onDaemonRanks(*nccl, kRanks, [&](int r, NcclComm& comm, std::string& error) {
    auto part = comm.split(r != 1, 0, r, "of a set", kLimit);
    if (!part.isOk() || (r == 1) != (*part == nullptr)) {
      error = "split: " + part.status().toString();
      return;
    }
    if (*part != nullptr) {
      std::vector<int64_t> x = {r + 1};
      Status s = (*part)->allReduce({x.data()}, 1, v1::INT64, v1::SUM, {nullptr}, kLimit);
      if (!s.isOk() || x[0] != 4) error = "the split's allreduce: " + s.toString() + " " + std::to_string(x[0]);
      std::string text = r == 2 ? "from two" : "--------";
      s = (*part)->broadcast({text.data()}, text.size(), 1, {nullptr}, kLimit);  // new rank 1: rank 2
      if (!s.isOk() || text != "from two") error = "the split's broadcast: " + s.toString() + " " + text;
    }
    std::vector<int64_t> y = {r + 1};
    Status s = comm.allReduce({y.data()}, 1, v1::INT64, v1::SUM, {nullptr}, kLimit);
    if (!s.isOk() || y[0] != 6) error += "the parent's allreduce: " + s.toString();
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Polls `comms` until their calls in flight ended (the stand-in runs each
// group on a thread of its own, as NCCL runs kernels on their stream);
// whether all ended well.
bool settled(const NcclApi& api, const std::vector<ncclComm_t>& comms) {
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  for (ncclComm_t comm : comms) {
    ncclResult_t state = ncclInProgress;
    while (api.commGetAsyncError(comm, &state) == ncclSuccess && state == ncclInProgress &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (state != ncclSuccess) return false;
  }
  return true;
}

// One thread holds two ranks: their calls go in one group (NCCL's way for a
// process driving several GPUs), the k-th call of each rank together.
TEST(FakeNccl, OneThreadHoldsSeveralRanksThroughGroupedCalls) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  const NcclApi& api = nccl->api();
  ncclUniqueId id;
  ASSERT_EQ(api.getUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(api.groupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(api.commInitRankConfig(&comms[r], 2, id, r, &config), ncclSuccess);
  ASSERT_EQ(api.groupEnd(), ncclSuccess);
  std::vector<double> a = {1, 2}, b = {10, 20}, c = {5, 5}, d = {7, 9};
  ASSERT_EQ(api.groupStart(), ncclSuccess);
  ASSERT_EQ(api.allReduce(a.data(), a.data(), 2, ncclFloat64, ncclSum, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(api.allReduce(c.data(), c.data(), 2, ncclFloat64, ncclAvg, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(api.allReduce(b.data(), b.data(), 2, ncclFloat64, ncclSum, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(api.allReduce(d.data(), d.data(), 2, ncclFloat64, ncclAvg, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(api.groupEnd(), ncclSuccess);
  ASSERT_TRUE(settled(api, {comms[0], comms[1]}));
  EXPECT_EQ(a, (std::vector<double>{11, 22}));
  EXPECT_EQ(b, (std::vector<double>{11, 22}));
  EXPECT_EQ(c, (std::vector<double>{6, 7}));
  EXPECT_EQ(d, (std::vector<double>{6, 7}));
  // Allgather and reducescatter, grouped the same way.
  std::vector<double> mine[2] = {{1, 2}, {3, 4}}, gathered_by[2] = {std::vector<double>(4), std::vector<double>(4)};
  std::vector<double> rows = {1, 2, 3, 4}, rows1 = {10, 20, 30, 40},
                      part[2] = {std::vector<double>(2), std::vector<double>(2)};
  ASSERT_EQ(api.groupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(api.allGather(mine[r].data(), gathered_by[r].data(), 2, ncclFloat64, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(api.reduceScatter(rows.data(), part[0].data(), 2, ncclFloat64, ncclSum, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(api.reduceScatter(rows1.data(), part[1].data(), 2, ncclFloat64, ncclSum, comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(api.groupEnd(), ncclSuccess);
  ASSERT_TRUE(settled(api, {comms[0], comms[1]}));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(gathered_by[r], (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(part[0], (std::vector<double>{11, 22}));
  EXPECT_EQ(part[1], (std::vector<double>{33, 44}));
  for (auto* comm : comms) EXPECT_EQ(api.commDestroy(comm), ncclSuccess);
}

// The daemon's shape for the GPUs of its node: one NcclComm holding every
// rank, its calls grouped.
TEST(FakeNccl, OneCommunicatorHoldsTheRanksOfSeveralGpus) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  auto id = nccl->uniqueId();
  ASSERT_TRUE(id.isOk());
  FakeDeviceOps ops;
  auto comm = NcclComm::create(*nccl, &ops, *id, 3, 0, {0, 1, 2}, "over this node's GPUs", kLimit);
  ASSERT_TRUE(comm.isOk()) << comm.status().toString();
  std::vector<float> x[3] = {{1, 2}, {10, 20}, {100, 200}};
  std::vector<void*> streams(3, nullptr);
  ASSERT_TRUE(
      (*comm)->allReduce({x[0].data(), x[1].data(), x[2].data()}, 2, v1::FLOAT32, v1::SUM, streams, kLimit).isOk());
  for (const auto& v : x) EXPECT_EQ(v, (std::vector<float>{111, 222}));
  std::string text[3] = {"-----", "hello", "-----"};
  ASSERT_TRUE((*comm)->broadcast({text[0].data(), text[1].data(), text[2].data()}, 5, 1, streams, kLimit).isOk());
  for (const auto& t : text) EXPECT_EQ(t, "hello");
  auto wrong = (*comm)->allReduce({x[0].data()}, 2, v1::FLOAT32, v1::SUM, {nullptr}, kLimit);
  EXPECT_THAT(wrong.message(), HasSubstr("1 buffers for 3 ranks"));
}

// `ranks` ranks of a new communicator, all formed from this thread (the
// stand-in forms them without waiting for each other).
std::vector<std::unique_ptr<NcclComm>> formInOneThread(const NcclLibrary& nccl, FakeDeviceOps* ops, int ranks) {
  std::vector<std::unique_ptr<NcclComm>> comms;
  auto id = nccl.uniqueId();
  EXPECT_TRUE(id.isOk());
  for (int r = 0; id.isOk() && r < ranks; ++r) {
    auto comm = NcclComm::create(nccl, ops, *id, ranks, r, {0}, "among the daemons", kLimit);
    EXPECT_TRUE(comm.isOk()) << comm.status().toString();
    if (!comm.isOk()) break;
    comms.push_back(std::move(comm).value());
  }
  return comms;
}

// A rank that aborts ends the others' waits at once with an error naming
// the cause (not at the end of their limit).
TEST(FakeNccl, AnAbortedRankFailsTheOthersPromptly) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  FakeDeviceOps ops;
  auto comms = formInOneThread(*nccl, &ops, 3);
  ASSERT_EQ(comms.size(), 3u);
  comms[1].reset();  // the destructor aborts a live communicator
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> x(4, 1.0f);
  Status s = comms[0]->allReduce({x.data()}, x.size(), v1::FLOAT32, v1::SUM, {nullptr}, kLimit);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_THAT(s.message(), HasSubstr("ncclAllReduce among the daemons"));
  EXPECT_THAT(s.message(), HasSubstr("another rank failed or aborted"));
  EXPECT_TRUE(comms[0]->aborted());
}

// A wait whose peer never comes ends once its interruption says so (an
// elastic job's epoch ended): the communicator is aborted and the error is
// the interruption's, long before the limit.
TEST(FakeNccl, AnInterruptedWaitEndsAtOnceWithItsCause) {
  auto nccl = load();
  ASSERT_NE(nccl, nullptr);
  FakeDeviceOps ops;
  auto comms = formInOneThread(*nccl, &ops, 2);
  ASSERT_EQ(comms.size(), 2u);
  const auto start = std::chrono::steady_clock::now();
  const WaitLimit limit(kLimit, [&] {
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(200) ? aborted("epoch 1 is over")
                                                                                     : okStatus();
  });
  std::vector<float> x(4, 1.0f);
  Status s = comms[0]->allReduce({x.data()}, x.size(), v1::FLOAT32, v1::SUM, {nullptr}, limit);  // rank 1 never comes
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.toString();
  EXPECT_THAT(s.message(), HasSubstr("ncclAllReduce among the daemons: epoch 1 is over; the communicator was aborted"));
  EXPECT_TRUE(comms[0]->aborted());
}

}  // namespace
}  // namespace gradsync::gpu
