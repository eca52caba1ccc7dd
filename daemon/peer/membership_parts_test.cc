// SPDX-License-Identifier: Apache-2.0
// A membership cut to its first part, the leader's kept memberships answered
// part by part, and a follower reading the rest from a real gRPC server on
// loopback: 4,096 nodes of 8 GPUs arrive whole with no message above 1 MiB.
#include "daemon/peer/membership_parts.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;

// A node as a job of 8-GPU nodes has it: 8 ranks, their pids, a UCX
// address of `ucx_bytes`.
v1::NodeInfo node(int index, size_t ucx_bytes = 200) {
  v1::NodeInfo n;
  n.set_peer_address("10.0." + std::to_string(index / 256) + "." + std::to_string(index % 256) + ":50051");
  n.set_hostname("node-" + std::to_string(index) + ".cluster.example");
  for (int r = 0; r < 8; ++r) {
    n.add_ranks(index * 8 + r);
    n.add_pids(100000 + r);
  }
  n.set_ucx_address(std::string(ucx_bytes, static_cast<char>('a' + index % 26)));
  n.set_cross_rank(index);
  n.set_gpus(8);
  n.set_topology("zone-a/rack-" + std::to_string(index / 32));
  return n;
}

NodeList nodes(int count, size_t ucx_bytes = 200) {
  NodeList list;
  for (int i = 0; i < count; ++i) *list.Add() = node(i, ucx_bytes);
  return list;
}

TEST(KeepFirstPart, AMembershipWithinTheBudgetStaysWhole) {
  NodeList list = nodes(16);
  EXPECT_EQ(keepFirstPart(&list, kMembershipPartBytes), 0);
  EXPECT_EQ(list.size(), 16);
}

TEST(KeepFirstPart, ALargerOneKeepsWhatFitsAndCountsTheRest) {
  NodeList list = nodes(4096);
  EXPECT_EQ(keepFirstPart(&list, kMembershipPartBytes), 4096);
  ASSERT_GT(list.size(), 0);
  ASSERT_LT(list.size(), 4096);
  v1::JoinJobResponse response;
  *response.mutable_nodes() = list;
  EXPECT_LE(response.ByteSizeLong(), kMembershipPartBytes + 16);
  EXPECT_EQ(list.Get(list.size() - 1).cross_rank(), list.size() - 1);
}

TEST(KeepFirstPart, ANodeLargerThanTheBudgetStillGoesAlone) {
  NodeList list = nodes(3, 4000);
  EXPECT_EQ(keepFirstPart(&list, 1000), 3);
  EXPECT_EQ(list.size(), 1);
}

TEST(PublishedMembers, AnswersPartsOfTheEpochsItKeeps) {
  PublishedMembers published(4096);
  for (uint64_t epoch = 1; epoch <= PublishedMembers::kKept + 1; ++epoch) {
    published.publish(epoch, nodes(static_cast<int>(10 * epoch)));
  }
  auto gone = published.part(1, 0);
  ASSERT_FALSE(gone.isOk());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("epoch 1 is no longer kept (the job is at epoch 5)"));

  auto part = published.part(5, 30);
  ASSERT_TRUE(part.isOk()) << part.status().message();
  ASSERT_GT(part->nodes_size(), 0);
  EXPECT_EQ(part->nodes(0).cross_rank(), 30);
  EXPECT_LE(part->ByteSizeLong(), 4096u + 512);

  EXPECT_EQ(published.part(5, 50).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(published.part(5, -1).status().code(), StatusCode::kOutOfRange);

  published.publish(5, nodes(3));  // published again: replaced
  EXPECT_EQ(published.part(5, 3).status().code(), StatusCode::kOutOfRange);
}

// The leader's side of Members over gRPC, counting the largest answer.
class MembersService final : public v1::Peer::Service {
 public:
  explicit MembersService(PublishedMembers* published) : published_(published) {}
  grpc::Status Members(grpc::ServerContext*, const v1::MembersRequest* request,
                       v1::MembersResponse* response) override {
    if (request->token() != "secret") return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "token");
    calls.fetch_add(1);
    auto part = published_->part(request->epoch(), request->first());
    if (!part.isOk()) {
      return grpc::Status(static_cast<grpc::StatusCode>(part.status().code()), part.status().message());
    }
    *response = std::move(part).value();
    largest.store(std::max(largest.load(), response->ByteSizeLong()));
    if (lie) response->add_nodes();  // one node too many
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<size_t> largest{0};
  std::atomic<bool> lie{false};

 private:
  PublishedMembers* const published_;
};

class ReadMembersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    stub_ =
        v1::Peer::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }
  std::chrono::system_clock::time_point deadline() const {
    return std::chrono::system_clock::now() + std::chrono::seconds(10);
  }

  PublishedMembers published_{kMembershipPartBytes};
  MembersService service_{&published_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Peer::Stub> stub_;
};

TEST_F(ReadMembersTest, FourThousandNodesOfEightGpusArriveWholeInPartsUnderOneMebibyte) {
  const NodeList whole = nodes(4096);
  v1::NewEpoch announced;
  announced.set_epoch(7);
  *announced.mutable_nodes() = whole;
  published_.publish(7, announced.nodes());
  const size_t whole_bytes = announced.ByteSizeLong();
  announced.set_node_count(keepFirstPart(announced.mutable_nodes(), kMembershipPartBytes));
  EXPECT_GT(whole_bytes, size_t{1} << 20);
  EXPECT_LT(announced.ByteSizeLong(), size_t{1} << 20);

  NodeList* got = announced.mutable_nodes();
  ASSERT_TRUE(readMembers(stub_.get(), "job", "secret", 7, announced.node_count(), got, deadline()).isOk());
  ASSERT_EQ(got->size(), 4096);
  for (int i = 0; i < got->size(); ++i) {
    ASSERT_EQ(got->Get(i).SerializeAsString(), whole.Get(i).SerializeAsString()) << "node " << i;
  }
  EXPECT_GE(service_.calls.load(), 2);
  EXPECT_LT(service_.largest.load(), size_t{1} << 20);
  std::printf(
      "4,096 nodes of 8 ranks (a 200 B UCX address each): %zu B whole, %zu B per node; "
      "the announcement and %d Members answers of at most %zu B\n",
      whole_bytes, whole_bytes / 4096, service_.calls.load(), service_.largest.load());
}

TEST_F(ReadMembersTest, AnEpochTheLeaderNoLongerKeepsFailsNamingIt) {
  published_.publish(9, nodes(4));
  NodeList got = nodes(1);
  const Status read = readMembers(stub_.get(), "job", "secret", 8, 4, &got, deadline());
  EXPECT_EQ(read.code(), StatusCode::kNotFound);
  EXPECT_THAT(read.message(), HasSubstr("epoch 8 (4 nodes, 1 in its announcement)"));
  EXPECT_THAT(read.message(), HasSubstr("no longer kept (the job is at epoch 9)"));
}

TEST_F(ReadMembersTest, CountsThatDoNotAddUpAreDataLoss) {
  published_.publish(3, nodes(4));
  NodeList five = nodes(5);
  EXPECT_EQ(readMembers(stub_.get(), "job", "secret", 3, 4, &five, deadline()).code(), StatusCode::kDataLoss);
  NodeList one = nodes(1);
  EXPECT_EQ(readMembers(stub_.get(), "job", "secret", 3, 1 << 30, &one, deadline()).code(), StatusCode::kDataLoss);
  service_.lie = true;
  EXPECT_EQ(readMembers(stub_.get(), "job", "secret", 3, 4, &one, deadline()).code(), StatusCode::kDataLoss);
}

TEST_F(ReadMembersTest, AWrongTokenIsRefused) {
  published_.publish(1, nodes(4));
  NodeList got = nodes(1);
  EXPECT_EQ(readMembers(stub_.get(), "job", "guess", 1, 4, &got, deadline()).code(), StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace gradsync::peer
