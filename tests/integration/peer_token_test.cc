// SPDX-License-Identifier: Apache-2.0
// The job's token guards every call between daemons, not only JoinJob:
// Coordinate, AbortJob, CheckMember and Elect with the wrong token are
// refused (UNAUTHENTICATED) by the leader and by a follower, an AbortJob or
// Elect with the right token from a node outside the job too
// (PERMISSION_DENIED),
// and the running job goes on.
#include <grpcpp/grpcpp.h>

#include <fstream>

#include "gtest/gtest.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"
#include "tests/integration/multi_daemon_fixture.h"

namespace gradsync::testutil {
namespace {

constexpr char kJob[] = "token-calls";
constexpr char kWrongToken[] = "not-the-token";
constexpr auto kTimeout = std::chrono::seconds(90);

std::unique_ptr<v1::Peer::Stub> stubFor(const std::string& address) {
  return v1::Peer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void withDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

grpc::Status abortJob(v1::Peer::Stub* stub, const std::string& from, const std::string& token = kWrongToken) {
  v1::AbortJobRequest request;
  request.set_job_id(kJob);
  request.set_token(token);
  request.set_from_peer_address(from);
  request.set_epoch(1);
  request.mutable_failure()->set_message("forged: the job failed");
  request.mutable_failure()->set_node_lost(true);
  grpc::ClientContext context;
  withDeadline(&context);
  v1::AbortJobResponse response;
  return stub->AbortJob(&context, request, &response);
}

grpc::Status elect(v1::Peer::Stub* stub, const std::string& voter, const std::string& token = kWrongToken) {
  v1::ElectRequest request;
  request.set_job_id(kJob);
  request.set_token(token);
  request.set_epoch(1);
  request.set_voter_address(voter);
  grpc::ClientContext context;
  withDeadline(&context);
  v1::ElectResponse response;
  return stub->Elect(&context, request, &response);
}

grpc::Status checkMember(v1::Peer::Stub* stub, const std::string& address) {
  v1::CheckMemberRequest request;
  request.set_job_id(kJob);
  request.set_token(kWrongToken);
  request.set_peer_address(address);
  grpc::ClientContext context;
  withDeadline(&context);
  v1::CheckMemberResponse response;
  return stub->CheckMember(&context, request, &response);
}

grpc::Status joinJob(v1::Peer::Stub* stub) {
  v1::JoinJobRequest request;
  request.set_job_id(kJob);
  request.set_token(kWrongToken);
  request.set_size(2);
  request.mutable_node()->set_peer_address("127.0.0.1:1");
  request.mutable_node()->add_ranks(1);
  grpc::ClientContext context;
  withDeadline(&context);
  v1::JoinJobResponse response;
  return stub->JoinJob(&context, request, &response);
}

// A follower's stream hello for cross rank 1 with the wrong token, then a
// forged failure: the stream is refused before anything of it is read.
grpc::Status coordinate(v1::Peer::Stub* stub) {
  grpc::ClientContext context;
  withDeadline(&context);
  auto stream = stub->Coordinate(&context);
  v1::FollowerMessage hello;
  hello.mutable_hello()->set_job_id(kJob);
  hello.mutable_hello()->set_token(kWrongToken);
  hello.mutable_hello()->set_cross_rank(1);
  stream->Write(hello);
  v1::FollowerMessage failure;
  failure.mutable_failure()->set_message("forged: the job failed");
  stream->Write(failure);
  stream->WritesDone();
  v1::LeaderMessage ignored;
  while (stream->Read(&ignored)) {
  }
  return stream->Finish();
}

TEST_F(MultiDaemonTest, EveryPeerCallWithTheWrongTokenIsRefusedAndTheJobGoesOn) {
  startDaemons(2);
  const std::string go = daemons_[1]->dir() + "/go";
  auto ranks = launchWith(kJob, {"formed_then_go"}, {0, 1}, {{"GRADSYNC_TEST_GO", go}});
  ASSERT_TRUE(waitFor(
      [&] {
        return ranks[0].log().find("FORMED") != std::string::npos && ranks[1].log().find("FORMED") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << ranks[0].log() << ranks[1].log() << logs();
  const std::string leader = daemons_[0]->peerAddress();
  const std::string follower = daemons_[1]->peerAddress();
  auto at_leader = stubFor(leader);
  auto at_follower = stubFor(follower);

  const auto refused = [](const grpc::Status& status, const std::string& what) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << what << ": " << status.error_message();
  };
  refused(joinJob(at_leader.get()), "JoinJob at the leader");
  refused(coordinate(at_leader.get()), "Coordinate at the leader");
  refused(checkMember(at_leader.get(), follower), "CheckMember at the leader");
  refused(abortJob(at_leader.get(), follower), "AbortJob at the leader");
  refused(abortJob(at_follower.get(), leader), "AbortJob at the follower");
  refused(elect(at_leader.get(), follower), "Elect at the leader");
  refused(elect(at_follower.get(), leader), "Elect at the follower");
  // The right token from a node that is not the job's: refused too.
  for (auto* stub : {at_leader.get(), at_follower.get()}) {
    for (const grpc::Status& status :
         {abortJob(stub, "127.0.0.1:1", "secret-token"), elect(stub, "127.0.0.1:1", "secret-token")}) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
      EXPECT_NE(status.error_message().find("127.0.0.1:1 is not a node of the job"), std::string::npos)
          << status.error_message();
    }
  }

  // Nothing of it reached the job: both ranks run their next collective.
  { std::ofstream(go) << "go"; }
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, kTimeout, &report)) << report << logs();
  for (const auto& d : daemons_) EXPECT_EQ(d->log().find("forged"), std::string::npos) << d->log();
}

}  // namespace
}  // namespace gradsync::testutil
