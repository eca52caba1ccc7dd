// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/leader_join.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;

// A leader's JoinJob: NOT_FOUND for the first `not_yet` calls (its ranks
// have not registered), then the membership; or it holds each call until
// the caller gives up (`hold`); or it answers as another protocol.
class JoinService final : public v1::Peer::Service {
 public:
  grpc::Status JoinJob(grpc::ServerContext* context, const v1::JoinJobRequest* request,
                       v1::JoinJobResponse* response) override {
    calls.fetch_add(1);
    if (hold.load()) {
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    if (calls.load() <= not_yet.load()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job yet");
    response->set_epoch(1);
    *response->add_nodes() = request->node();
    ProtocolRange{speaks.load(), speaks.load()}.stamp(response);
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::atomic<int> not_yet{0};
  std::atomic<bool> hold{false};
  std::atomic<uint32_t> speaks{kPeerProtocol};
};

class LeaderJoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }
  LeaderJoin::Options options(const std::string& address, CrossClock::duration timeout = std::chrono::seconds(10)) {
    return {"j", "t", address, "127.0.0.1:1", timeout, ProtocolRange{}};
  }
  StatusOr<v1::JoinJobResponse> join(LeaderJoin& joining, const std::string& address) {
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    auto stub = v1::Peer::NewStub(channel);
    v1::JoinJobRequest request;
    request.set_job_id("j");
    request.mutable_node()->set_peer_address("127.0.0.1:1");
    return joining.join(channel.get(), stub.get(), request);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  int port_ = 0;
  JoinService service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(LeaderJoinTest, RetriesWhileTheLeaderDoesNotHoldTheJobYetAndReturnsItsMembership) {
  service_.not_yet = 3;
  LeaderJoin joining(options(address()));
  auto joined = join(joining, address());
  ASSERT_TRUE(joined.isOk()) << joined.status().message();
  EXPECT_EQ(joined->nodes_size(), 1);
  EXPECT_EQ(service_.calls.load(), 4);
}

TEST_F(LeaderJoinTest, ALeaderThatNeverHoldsTheJobIsNamedAtTheJoinTimeout) {
  service_.not_yet = 1 << 30;
  LeaderJoin joining(options(address(), std::chrono::milliseconds(600)));
  auto joined = join(joining, address());
  ASSERT_FALSE(joined.isOk());
  EXPECT_EQ(joined.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(joined.status().message(), HasSubstr("cannot join the leader at " + address() + ": no job yet"));
  EXPECT_GE(service_.calls.load(), 2);
}

TEST_F(LeaderJoinTest, ALeaderThatAcceptsNoConnectionIsNamedWithGrpcsReason) {
  server_->Shutdown(std::chrono::system_clock::now());
  server_.reset();
  LeaderJoin joining(options(address(), std::chrono::milliseconds(1500)));
  auto joined = join(joining, address());
  ASSERT_FALSE(joined.isOk());
  EXPECT_EQ(joined.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(joined.status().message(), HasSubstr("its peer service accepts no connection"));
}

TEST_F(LeaderJoinTest, ALeaderOfAnotherProtocolIsRefusedNamingBoth) {
  service_.speaks = kPeerProtocol + 5;
  LeaderJoin joining(options(address()));
  auto joined = join(joining, address());
  ASSERT_FALSE(joined.isOk());
  EXPECT_EQ(joined.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(joined.status().message(), HasSubstr("the leader at " + address()));
  EXPECT_THAT(joined.status().message(), HasSubstr("this node (127.0.0.1:1)"));
}

TEST_F(LeaderJoinTest, StopAndAbortEndTheCallInProgressAndEveryLaterOne) {
  service_.hold = true;
  LeaderJoin joining(options(address(), std::chrono::seconds(30)));
  auto pending = std::async(std::launch::async, [&] { return join(joining, address()); });
  while (service_.calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = CrossClock::now();
  joining.abort("node x was lost");
  auto joined = pending.get();
  EXPECT_LT(CrossClock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(joined.isOk());
  // The held call ends cancelled; the join does not call again.
  EXPECT_EQ(service_.calls.load(), 1);

  auto again = join(joining, address());
  EXPECT_EQ(again.status().code(), StatusCode::kCancelled);
  EXPECT_THAT(again.status().message(), HasSubstr("failed while joining: node x was lost"));
  joining.stop();
  EXPECT_THAT(join(joining, address()).status().message(), HasSubstr("job stopped while joining"));
}

TEST_F(LeaderJoinTest, AStopWhileWaitingForTheLeadersJobEndsTheWaitAtOnce) {
  service_.not_yet = 1 << 30;
  LeaderJoin joining(options(address(), std::chrono::seconds(30)));
  auto pending = std::async(std::launch::async, [&] { return join(joining, address()); });
  while (service_.calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const auto start = CrossClock::now();
  joining.stop();
  auto joined = pending.get();
  EXPECT_LT(CrossClock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(joined.status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace gradsync::peer
