// SPDX-License-Identifier: Apache-2.0
// PeerDataPlane over real UCX endpoints in one process (one thread per
// "daemon"), with the membership a stand-in: algorithm per size, steps
// among a subset of the nodes, tags kept alike, failures and phases.
#include "daemon/peer/peer_data_plane.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/collective/mesh_test_util.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using collective::MeshNode;

// Node `self` of `n`, rank r on node r; endpoints from the test's mesh.
class FakeEndpoints : public NodeEndpoints {
 public:
  FakeEndpoints(int self, MeshNode* node, bool measure_links)
      : self_(self), node_(node), measure_links_(measure_links) {}

  StatusOr<std::optional<collective::RingContext>> ring(const collective::TransferId& id,
                                                        CrossClock::time_point deadline, uint64_t,
                                                        const std::vector<int>& nodes) override {
    rings.push_back(describe(id));
    auto at = std::find(nodes.begin(), nodes.end(), self_);
    if (at == nodes.end()) return std::optional<collective::RingContext>();
    const int pos = static_cast<int>(at - nodes.begin()), n = static_cast<int>(nodes.size());
    collective::RingContext ring;
    ring.transport = node_->transport.get();
    ring.left = node_->peers[nodes[(pos - 1 + n) % n]].get();
    ring.right = node_->peers[nodes[(pos + 1) % n]].get();
    ring.rank = pos;
    ring.size = n;
    ring.id = id;
    ring.deadline = deadline;
    return std::optional<collective::RingContext>(ring);
  }
  StatusOr<std::optional<collective::MeshContext>> mesh(const collective::TransferId& id,
                                                        CrossClock::time_point deadline, uint64_t,
                                                        const std::vector<int>& nodes) override {
    meshes.push_back(describe(id));
    auto at = std::find(nodes.begin(), nodes.end(), self_);
    if (at == nodes.end()) return std::optional<collective::MeshContext>();
    collective::MeshContext mesh;
    mesh.transport = node_->transport.get();
    for (int node : nodes) mesh.peers.push_back(node == self_ ? nullptr : node_->peers[node].get());
    mesh.rank = static_cast<int>(at - nodes.begin());
    mesh.id = id;
    mesh.deadline = deadline;
    return std::optional<collective::MeshContext>(mesh);
  }
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const override {
    *epoch = 1;
    std::vector<v1::NodeInfo> nodes(node_->peers.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].set_cross_rank(static_cast<int>(i));
      nodes[i].add_ranks(static_cast<int>(i));
      nodes[i].set_hostname("host" + std::to_string(i));               // distinct: "auto" measures
      if (!measure_links_ && i == 1) nodes[i].set_link_cost("fixed");  // one node asking is enough
    }
    return nodes;
  }
  NcclId ncclId() const override { return {"", 1, self_}; }
  Status epochRuns(uint64_t) const override { return okStatus(); }
  size_t dropBatchStrays(uint64_t, uint64_t) override { return 0; }

  // The collectives asked for: "batch.response.call".
  std::vector<std::string> rings, meshes;
  static std::string describe(const collective::TransferId& id) {
    return std::to_string(id.batch) + "." + std::to_string(id.response) + "." + std::to_string(id.call);
  }

 private:
  const int self_;
  MeshNode* node_;
  const bool measure_links_;
};

struct Daemon {
  std::unique_ptr<FakeEndpoints> endpoints;
  std::unique_ptr<PeerDataPlane> plane;
  std::vector<std::string> phases;
  std::vector<std::string> failures;
  std::vector<collective::LinkCost> measured;
};

// With the fixed cost of a message unless `measure_links`.
std::vector<Daemon> makeDaemons(std::vector<MeshNode>& mesh, std::chrono::milliseconds timeout,
                                bool measure_links = false) {
  std::vector<Daemon> daemons(mesh.size());
  for (size_t i = 0; i < mesh.size(); ++i) {
    Daemon& d = daemons[i];
    d.endpoints = std::make_unique<FakeEndpoints>(static_cast<int>(i), &mesh[i], measure_links);
    PeerDataPlane::Hooks hooks;
    hooks.phase = [&d](const char* name, bool begin) { d.phases.push_back(std::string(begin ? "+" : "-") + name); };
    hooks.failed = [&d](const Status& status) {
      d.failures.push_back(status.message());
      return aborted("the job's cause (then " + status.message() + ")");
    };
    hooks.measured = [&d](size_t, const collective::LinkCost& cost) { d.measured.push_back(cost); };
    d.plane = std::make_unique<PeerDataPlane>(d.endpoints.get(), timeout, std::move(hooks));
    d.plane->beginBatch(/*sequence=*/7, /*epoch=*/1);
  }
  return daemons;
}

TEST(PeerDataPlane, SmallAllreducesTakeTheDirectExchangeLargeOnesTheRing) {
  auto mesh = collective::makeMesh(3);
  auto daemons = makeDaemons(mesh, std::chrono::seconds(30));
  const size_t small = 16, large = 1 << 20;  // elements
  std::vector<std::vector<float>> data(3);
  auto statuses = collective::onEveryNode(3, [&](int r) {
    data[r].assign(small, static_cast<float>(r + 1));
    RETURN_IF_ERROR(daemons[r].plane->allreduce({0, 1, 2}, data[r].data(), small, v1::FLOAT32, v1::SUM));
    if (data[r][small - 1] != 6.0f) return internalError("small allreduce gave " + std::to_string(data[r][0]));
    data[r].assign(large, static_cast<float>(r + 1));
    RETURN_IF_ERROR(daemons[r].plane->allreduce({0, 1, 2}, data[r].data(), large, v1::FLOAT32, v1::SUM));
    if (data[r][0] != 6.0f || data[r][large - 1] != 6.0f) return internalError("large allreduce");
    return okStatus();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    const Daemon& d = daemons[r];
    EXPECT_EQ(d.endpoints->meshes, std::vector<std::string>{"7.0.0"});  // the first step: direct
    EXPECT_EQ(d.endpoints->rings, std::vector<std::string>{"7.0.1"});   // the second: the ring
    EXPECT_EQ(d.plane->callsInResponse(), 2u);
    EXPECT_EQ(d.phases, (std::vector<std::string>{"+CROSS_NODE_ALLREDUCE", "-CROSS_NODE_ALLREDUCE",
                                                  "+CROSS_NODE_ALLREDUCE", "-CROSS_NODE_ALLREDUCE"}));
    EXPECT_GT(d.plane->busySeconds(), 0.0);
    EXPECT_TRUE(d.failures.empty());
  }
}

// The links are measured once per set of nodes and epoch, at its first
// allreduce, by its nodes alone (with that allreduce's endpoints and tag),
// and every node of the set gets the same cost.
TEST(PeerDataPlane, TheLinksAreMeasuredOncePerSetOfNodesAndAgreedOn) {
  auto mesh = collective::makeMesh(3);
  auto daemons = makeDaemons(mesh, std::chrono::seconds(30), /*measure_links=*/true);
  auto statuses = collective::onEveryNode(3, [&](int r) {
    for (const executor::NodeSet& nodes : {executor::NodeSet{0, 1, 2}, executor::NodeSet{0, 2}}) {
      for (size_t count : {size_t{16}, size_t{1} << 18, size_t{16}}) {
        std::vector<float> data(count, static_cast<float>(r + 1));
        RETURN_IF_ERROR(daemons[r].plane->allreduce(nodes, data.data(), count, v1::FLOAT32, v1::SUM));
        const bool member = std::find(nodes.begin(), nodes.end(), r) != nodes.end();
        float want = static_cast<float>(r + 1);
        if (member) want = nodes.size() == 3 ? 6.0f : 4.0f;
        if (data[count - 1] != want) return internalError("allreduce gave " + std::to_string(data[count - 1]));
      }
    }
    return okStatus();
  });
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(statuses[r].isOk()) << r << ": " << statuses[r].toString();
  ASSERT_EQ(daemons[0].measured.size(), 2u);  // all three, then nodes 0 and 2
  ASSERT_EQ(daemons[1].measured.size(), 1u);  // not one of {0, 2}
  ASSERT_EQ(daemons[2].measured.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(daemons[0].measured[k].latency_us, daemons[2].measured[k].latency_us) << k;
    EXPECT_EQ(daemons[0].measured[k].message_us, daemons[2].measured[k].message_us) << k;
    EXPECT_EQ(daemons[0].measured[k].byte_us, daemons[2].measured[k].byte_us) << k;
  }
  EXPECT_EQ(daemons[0].measured[0].latency_us, daemons[1].measured[0].latency_us);
  EXPECT_EQ(std::count(daemons[1].phases.begin(), daemons[1].phases.end(), "+CROSS_NODE_LINK_PROBE"), 1);
  EXPECT_EQ(std::count(daemons[0].phases.begin(), daemons[0].phases.end(), "+CROSS_NODE_LINK_PROBE"), 2);
}

TEST(PeerDataPlane, AJobMeasuresItsLinksUnlessANodeSaysFixedOrAutoNodesShareAHost) {
  const auto nodes = [](std::vector<std::pair<std::string, std::string>> host_and_mode) {
    std::vector<v1::NodeInfo> members;
    for (const auto& [host, mode] : host_and_mode) {
      members.emplace_back();
      members.back().set_hostname(host);
      members.back().set_link_cost(mode);
    }
    return members;
  };
  EXPECT_TRUE(measuresLinks(nodes({{"a", "auto"}, {"b", ""}})));  // "" from an older daemon: auto
  EXPECT_FALSE(measuresLinks(nodes({{"a", "auto"}, {"a", "auto"}})));
  EXPECT_TRUE(measuresLinks(nodes({{"a", "auto"}, {"a", "measured"}})));
  EXPECT_FALSE(measuresLinks(nodes({{"a", "measured"}, {"b", "fixed"}})));
  EXPECT_FALSE(measuresLinks(nodes({{"a", "auto"}})));
}

TEST(PeerDataPlane, ANodeOutsideTheStepSkipsItButKeepsTheTagsAlike) {
  auto mesh = collective::makeMesh(3);
  auto daemons = makeDaemons(mesh, std::chrono::seconds(30));
  std::vector<std::vector<uint8_t>> rows(3, std::vector<uint8_t>(6, 0));
  auto statuses = collective::onEveryNode(3, [&](int r) {
    // A broadcast among nodes 0 and 2 from rank 2: node 1 holds its bytes.
    std::fill(rows[r].begin(), rows[r].end(), static_cast<uint8_t>(10 + r));
    RETURN_IF_ERROR(daemons[r].plane->broadcast({0, 2}, rows[r].data(), rows[r].size(), /*root_rank=*/2));
    // Then an allgather among all three: each owns 2 bytes.
    std::vector<std::vector<collective::Range>> owned = {{{0, 2}}, {{2, 2}}, {{4, 2}}};
    std::vector<uint8_t> gathered(6, 0);
    gathered[2 * r] = gathered[2 * r + 1] = static_cast<uint8_t>(r);
    RETURN_IF_ERROR(daemons[r].plane->allgather({0, 1, 2}, gathered.data(), owned));
    if (gathered != std::vector<uint8_t>{0, 0, 1, 1, 2, 2}) return internalError("allgather");
    return okStatus();
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(statuses[r].isOk()) << r << ": " << statuses[r].toString();
  EXPECT_EQ(rows[0], std::vector<uint8_t>(6, 12));
  EXPECT_EQ(rows[1], std::vector<uint8_t>(6, 11));  // not one of the step's nodes
  EXPECT_EQ(rows[2], std::vector<uint8_t>(6, 12));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(daemons[r].endpoints->rings, (std::vector<std::string>{"7.0.0", "7.0.1"})) << r;
  }
}

// A daemon that fails before its part of a response (here: node 2 skips
// response 0's broadcast altogether, as a daemon whose rank's buffer is
// gone would) leaves the next response's transfers paired right: its
// transfers are named by the response, not by a count of the calls made.
TEST(PeerDataPlane, ADaemonThatSkipsAResponseShiftsNothingOfTheNext) {
  auto mesh = collective::makeMesh(3);
  auto daemons = makeDaemons(mesh, std::chrono::milliseconds(1500));
  std::vector<Status> broadcast(3);
  auto statuses = collective::onEveryNode(3, [&](int r) {
    PeerDataPlane& plane = *daemons[r].plane;
    plane.beginResponse(0);
    std::vector<uint8_t> row(6, static_cast<uint8_t>(10 + r));
    if (r != 2) broadcast[r] = plane.broadcast({0, 1, 2}, row.data(), row.size(), /*root_rank=*/0);
    plane.beginResponse(1);
    std::vector<std::vector<collective::Range>> owned = {{{0, 2}}, {{2, 2}}, {{4, 2}}};
    std::vector<uint8_t> gathered(6, 0);
    gathered[2 * r] = gathered[2 * r + 1] = static_cast<uint8_t>(r);
    RETURN_IF_ERROR(plane.allgather({0, 1, 2}, gathered.data(), owned));
    if (gathered != std::vector<uint8_t>{0, 0, 1, 1, 2, 2}) {
      return internalError("node " + std::to_string(r) + ": the allgather after the skipped response gave " +
                           std::to_string(gathered[0]) + " " + std::to_string(gathered[2]) + " " +
                           std::to_string(gathered[4]));
    }
    return okStatus();
  });
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(statuses[r].isOk()) << r << ": " << statuses[r].toString();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(daemons[r].endpoints->rings.back(), "7.1.0") << r;
  }
}

// A step's failure names where it was: the batch, its epoch, the fused
// response and the call in it.
TEST(PeerDataPlane, AFailedStepNamesItsBatchResponseAndCall) {
  auto mesh = collective::makeMesh(2);
  auto daemons = makeDaemons(mesh, std::chrono::milliseconds(200));
  daemons[0].plane->beginResponse(3);
  std::vector<uint8_t> row(6, 1);
  Status status = daemons[0].plane->broadcast({0, 1}, row.data(), row.size(), /*root_rank=*/1);
  ASSERT_EQ(daemons[0].failures.size(), 1u) << status.toString();
  EXPECT_NE(daemons[0].failures[0].find("batch 7 (epoch 1), fused response 3, call 0: ring broadcast"),
            std::string::npos)
      << daemons[0].failures[0];
}

TEST(PeerDataPlane, AFailedStepGoesThroughTheFailureHook) {
  auto mesh = collective::makeMesh(2);
  auto daemons = makeDaemons(mesh, std::chrono::milliseconds(200));
  std::vector<float> data(16, 1.0f);  // the direct exchange (eager sends); node 1 never takes part
  Status status = daemons[0].plane->allreduce({0, 1}, data.data(), data.size(), v1::FLOAT32, v1::SUM);
  EXPECT_EQ(status.code(), StatusCode::kAborted) << status.toString();
  EXPECT_NE(status.message().find("the job's cause (then "), std::string::npos) << status.toString();
  ASSERT_EQ(daemons[0].failures.size(), 1u);
  EXPECT_EQ(daemons[0].phases, (std::vector<std::string>{"+CROSS_NODE_ALLREDUCE", "-CROSS_NODE_ALLREDUCE"}));
}

TEST(PeerDataPlane, NodesOfRanksAndOneNodeSteps) {
  auto mesh = collective::makeMesh(2);
  auto daemons = makeDaemons(mesh, std::chrono::seconds(5));
  PeerDataPlane& plane = *daemons[0].plane;
  EXPECT_TRUE(plane.multiNode());
  EXPECT_EQ(plane.nodeCount(), 2);
  EXPECT_EQ(plane.nodeOf(1), 1);
  EXPECT_EQ(plane.nodeOf(0), 0);
  EXPECT_TRUE(plane.ncclPeers().id.empty());  // the leader made no NCCL id
  // A reduce-scatter on this node alone: its contribution is the result.
  std::vector<float> input = {1, 2, 3, 4}, out(4, 0);
  ASSERT_TRUE(plane.reduceScatter({0}, input.data(), out.data(), v1::FLOAT32, v1::SUM, {{{0, 2}}, {{2, 2}}}).isOk());
  EXPECT_EQ(out, input);
  EXPECT_TRUE(daemons[0].endpoints->rings.empty());
  EXPECT_EQ(plane.callsInResponse(), 1u);
}

}  // namespace
}  // namespace gradsync::peer
