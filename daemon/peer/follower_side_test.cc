// SPDX-License-Identifier: Apache-2.0
// A follower's side against a fake leader (and fake followers) over
// loopback gRPC, with a stand-in host: no CrossNode, no daemon.
#include "daemon/peer/follower_side.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/coordinator/request_wire.h"
#include "daemon/coordinator/test_requests.h"
#include "daemon/peer/coordinate_reactor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Waits (up to 10 s) until `done` holds.
bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// A Peer service on loopback: as the leader, it answers JoinJob with the
// membership `nodes` (the joining node's entry taking its ranks), serves the
// Coordinate stream (recording what the follower writes; `end_with`, once
// set, ends the stream at the follower's next message) and CheckMember; as
// another follower, it counts AbortJob calls.
class FakePeer final : public v1::Peer::WithCallbackMethod_Coordinate<v1::Peer::Service> {
 public:
  FakePeer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakePeer() override { server_->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status JoinJob(grpc::ServerContext*, const v1::JoinJobRequest* request,
                       v1::JoinJobResponse* response) override {
    MutexLock lock(mutex_);
    join_ = *request;
    response->set_epoch(1);
    for (const auto& node : nodes) *response->add_nodes() = node;
    ProtocolRange{}.stamp(response);
    return grpc::Status::OK;
  }
  grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>* Coordinate(
      grpc::CallbackServerContext* context) override {
    auto resolve = [this](const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                          std::unique_ptr<FollowerSession>* session) {
      MutexLock lock(mutex_);
      hello_ = hello.hello();
      stream_ = std::move(stream);
      *session = std::make_unique<Session>(this);
      return grpc::Status::OK;
    };
    return new CoordinateReactor(context, std::move(resolve), Outbox::Limits{});
  }
  grpc::Status CheckMember(grpc::ServerContext*, const v1::CheckMemberRequest*,
                           v1::CheckMemberResponse* response) override {
    check_calls.fetch_add(1);
    response->set_member(removed.empty());
    response->set_removed(removed);
    response->set_epoch(2);
    return grpc::Status::OK;
  }
  grpc::Status AbortJob(grpc::ServerContext*, const v1::AbortJobRequest*, v1::AbortJobResponse*) override {
    abort_calls.fetch_add(1);
    return grpc::Status::OK;
  }

  // The leader writes `message` on the follower's stream.
  bool send(v1::LeaderMessage message) {
    std::shared_ptr<FollowerStream> stream;
    {
      MutexLock lock(mutex_);
      stream = stream_;
    }
    return stream != nullptr && stream->send(share(std::move(message)));
  }
  bool attached() {
    MutexLock lock(mutex_);
    return stream_ != nullptr;
  }
  v1::FollowerMessage::Hello hello() {
    MutexLock lock(mutex_);
    return hello_;
  }
  v1::JoinJobRequest joinRequest() {
    MutexLock lock(mutex_);
    return join_;
  }
  std::vector<v1::FollowerMessage> received() {
    MutexLock lock(mutex_);
    return received_;
  }
  // The follower's messages of one kind (requests merged or not count by request).
  size_t count(bool (v1::FollowerMessage::*has)() const) {
    size_t n = 0;
    for (const auto& m : received()) n += (m.*has)() ? 1 : 0;
    return n;
  }
  void endWith(grpc::Status status) {
    MutexLock lock(mutex_);
    end_with_ = std::move(status);
  }

  std::vector<v1::NodeInfo> nodes;  // set before the follower joins
  std::string removed;              // CheckMember: why the asking node was removed (empty: a member)
  std::atomic<int> check_calls{0};
  std::atomic<int> abort_calls{0};

 private:
  class Session final : public FollowerSession {
   public:
    explicit Session(FakePeer* peer) : peer_(peer) {}
    grpc::Status onMessage(const v1::FollowerMessage& message) override {
      MutexLock lock(peer_->mutex_);
      peer_->received_.push_back(message);
      return peer_->end_with_;
    }
    void onEnd(bool, const std::string&) override {
      MutexLock lock(peer_->mutex_);
      peer_->stream_.reset();
    }

   private:
    FakePeer* const peer_;
  };

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  Mutex mutex_;
  v1::JoinJobRequest join_ GS_GUARDED_BY(mutex_);
  v1::FollowerMessage::Hello hello_ GS_GUARDED_BY(mutex_);
  std::shared_ptr<FollowerStream> stream_ GS_GUARDED_BY(mutex_);
  std::vector<v1::FollowerMessage> received_ GS_GUARDED_BY(mutex_);
  grpc::Status end_with_ GS_GUARDED_BY(mutex_);
};

// What the follower's side asked of its node, recorded.
class StandInHost final : public FollowerSide::Host {
 public:
  struct Failure {
    std::string kind;  // "detected", "heard" or "leader lost"
    std::string cause;
    bool node_lost = false;
    std::string from;
  };
  void joined(const v1::JoinJobResponse& response) override {
    MutexLock lock(mutex_);
    members_ = {response.nodes().begin(), response.nodes().end()};
  }
  uint64_t epoch() const override { return 1; }
  int selfCrossRank() const override { return 1; }
  std::vector<v1::NodeInfo> members(uint64_t* epoch) const override {
    MutexLock lock(mutex_);
    *epoch = 1;
    return members_;
  }
  bool stopping() const override { return false; }
  void round(const v1::RoundMessage&) override {}
  void batch(std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t, uint64_t) override {
    MutexLock lock(mutex_);
    for (const auto& response : batch) batches_.emplace_back(sequence, response.name);
  }
  void newEpoch(const v1::NewEpoch&) override {}
  StatusOr<bool> elect(const std::string& cause) override {
    MutexLock lock(mutex_);
    elections_.push_back(cause);
    return true;  // this node leads now
  }
  void failureDetected(std::string cause, bool node_lost) override { add({"detected", cause, node_lost, ""}); }
  void heardFailure(const v1::JobFailure& failure, const std::string& from) override {
    add({"heard", failure.message(), failure.node_lost(), from});
  }
  void leaderLost(std::string cause) override { add({"leader lost", cause, true, ""}); }

  std::vector<Failure> failures() const {
    MutexLock lock(mutex_);
    return failures_;
  }
  std::vector<std::pair<uint64_t, std::string>> batches() const {
    MutexLock lock(mutex_);
    return batches_;
  }
  std::vector<std::string> elections() const {
    MutexLock lock(mutex_);
    return elections_;
  }
  bool joinedYet() const {
    MutexLock lock(mutex_);
    return !members_.empty();
  }

 private:
  void add(Failure failure) {
    MutexLock lock(mutex_);
    failures_.push_back(std::move(failure));
  }
  mutable Mutex mutex_;
  std::vector<v1::NodeInfo> members_ GS_GUARDED_BY(mutex_);
  std::vector<Failure> failures_ GS_GUARDED_BY(mutex_);
  std::vector<std::pair<uint64_t, std::string>> batches_ GS_GUARDED_BY(mutex_);
  std::vector<std::string> elections_ GS_GUARDED_BY(mutex_);
};

coordinator::Request request(int rank, const std::string& name) { return coordinator::testing::allreduce(rank, name); }

v1::NodeInfo node(const std::string& address, int cross_rank, std::vector<int> ranks) {
  v1::NodeInfo n;
  n.set_peer_address(address);
  n.set_hostname("host-" + std::to_string(cross_rank));
  n.set_cross_rank(cross_rank);
  for (int r : ranks) n.add_ranks(r);
  return n;
}

class FollowerSideTest : public ::testing::Test {
 protected:
  static constexpr char kSelf[] = "127.0.0.1:1";  // this follower's peer address (never dialled)

  // The membership: the leader, this follower, and `others` more followers.
  void SetUp() override { leader_.nodes = {node(leader_.address(), 0, {0}), node(kSelf, 1, {1})}; }
  void addFollowers(int others) {
    for (int i = 0; i < others; ++i) {
      others_.push_back(std::make_unique<FakePeer>());
      leader_.nodes.push_back(node(others_.back()->address(), 2 + i, {2 + i}));
    }
  }
  // Starts the follower and waits until its stream is attached.
  void follow(bool elastic = false, bool failover = false) {
    CrossNodeOptions options;
    options.job_id = "j";
    options.token = "t";
    options.size = static_cast<int>(leader_.nodes.size());
    options.self_address = kSelf;
    options.leader_address = leader_.address();
    options.join_timeout = 10s;
    options.elastic = elastic;
    options.failover = failover;
    side_ = std::make_unique<FollowerSide>(options, &codec_, &notices_, &host_);
    side_->start(node(kSelf, -1, {1}));
    ASSERT_TRUE(eventually([&] { return leader_.attached(); }));
  }
  int abortCalls() const {
    int calls = 0;
    for (const auto& peer : others_) calls += peer->abort_calls.load();
    return calls;
  }

  FakePeer leader_;
  std::vector<std::unique_ptr<FakePeer>> others_;
  StandInHost host_;
  CoordinationCodec codec_{"j", 64};
  FailureNotices notices_;
  std::unique_ptr<FollowerSide> side_;  // first to go
};

TEST_F(FollowerSideTest, JoinsTheLeaderOpensItsStreamAndForwardsRequests) {
  follow();
  EXPECT_TRUE(host_.joinedYet());
  EXPECT_EQ(leader_.joinRequest().node().peer_address(), kSelf);
  EXPECT_FALSE(leader_.joinRequest().elastic_join());
  EXPECT_EQ(leader_.hello().cross_rank(), 1);
  EXPECT_EQ(leader_.hello().peer_address(), kSelf);

  side_->forward(1, coordinator::enqueueOf(request(1, "grad")), 1);
  ASSERT_TRUE(eventually([&] {
    return leader_.count(&v1::FollowerMessage::has_request) + leader_.count(&v1::FollowerMessage::has_requests) == 1;
  }));
  side_->reportRankLost(1, 1, "rank 1 crashed");
  ASSERT_TRUE(eventually([&] { return leader_.count(&v1::FollowerMessage::has_rank_lost) == 1; }));
  EXPECT_TRUE(host_.failures().empty());
}

TEST_F(FollowerSideTest, ABatchInPartsReachesTheHostWholeAndDecoded) {
  follow();
  CoordinationCodec leaders_codec("j", 64);
  v1::Batch batch;
  batch.set_sequence(7);
  batch.set_epoch(1);
  for (const std::string name : {"a", "b"}) {
    coordinator::Response response;
    response.name = name;
    response.type = v1::ALLREDUCE;
    response.ranks = {0, 1};
    response.requests = {request(0, name), request(1, name)};
    *batch.add_responses() = leaders_codec.encode(response);
  }
  for (auto& part : splitBatch(std::move(batch), /*part_bytes=*/1)) {
    v1::LeaderMessage message;
    *message.mutable_batch() = std::move(part);
    ASSERT_TRUE(leader_.send(std::move(message)));
  }
  ASSERT_TRUE(eventually([&] { return host_.batches().size() == 2; }));
  const std::vector<std::pair<uint64_t, std::string>> expected = {{7, "a"}, {7, "b"}};
  EXPECT_EQ(host_.batches(), expected);
  EXPECT_TRUE(host_.failures().empty());
}

// A failure heard from the leader, which told every other node: the host
// hears it naming the leader, and nothing goes back to the leader or to
// any other follower.
TEST_F(FollowerSideTest, AFailureHeardFromTheLeaderIsPassedOnToNoOne) {
  addFollowers(3);
  follow();
  v1::LeaderMessage message;
  message.mutable_failure()->set_message("job 'j': lost node 3");
  message.mutable_failure()->set_node_lost(true);
  ASSERT_TRUE(leader_.send(message));
  ASSERT_TRUE(eventually([&] { return host_.failures().size() == 1; }));
  const auto failure = host_.failures()[0];
  EXPECT_EQ(failure.kind, "heard");
  EXPECT_THAT(failure.from, HasSubstr("the leader"));
  EXPECT_THAT(failure.from, HasSubstr("host-0"));
  side_->heard(message.failure(), nullptr);  // what the node does with it
  EXPECT_EQ(notices_.tell(true), FailureNotices::Verdict::kToldAlready);
  side_.reset();
  EXPECT_EQ(leader_.count(&v1::FollowerMessage::has_failure), 0u);
  EXPECT_EQ(abortCalls(), 0);
}

// A follower that lost the leader tells it around the leader, once: to
// its relays among the followers (log2 F of them), and to the leader's
// stream in case it still reads.
TEST_F(FollowerSideTest, ALostLeaderIsToldAroundItToTheRelaysOnce) {
  addFollowers(3);  // F = 4 followers: this one tells those 1 and 2 places after it
  follow();
  side_->tell("job 'j': lost the leader", true, nullptr, FailureNotices::Route::kAroundTheLeader);
  v1::JobFailure again;
  again.set_node_lost(true);
  side_->relayAbort(again);  // told once already
  side_->leave();            // waits for the AbortJob answers
  EXPECT_EQ(abortCalls(), 2);
  EXPECT_EQ(others_[0]->abort_calls.load(), 1);
  EXPECT_EQ(others_[1]->abort_calls.load(), 1);
  EXPECT_EQ(others_[2]->abort_calls.load(), 0);
}

TEST_F(FollowerSideTest, AFollowersOwnFailureGoesToTheLeaderAlone) {
  addFollowers(3);
  follow();
  side_->tell("job 'j': rank 1 crashed", false, nullptr, FailureNotices::Route::kThroughTheLeader);
  ASSERT_TRUE(eventually([&] { return leader_.count(&v1::FollowerMessage::has_failure) == 1; }));
  side_->leave();
  EXPECT_EQ(abortCalls(), 0);
}

TEST_F(FollowerSideTest, ABrokenStreamIsTheLeaderLostNamingIt) {
  follow();
  leader_.endWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  side_->reportJoinerGone(9);  // the leader's session ends the stream on it
  ASSERT_TRUE(eventually([&] { return host_.failures().size() == 1; }));
  const auto failure = host_.failures()[0];
  EXPECT_EQ(failure.kind, "leader lost");
  EXPECT_THAT(failure.cause, HasSubstr("lost the leader node " + leader_.address() + " (host host-0"));
  EXPECT_THAT(failure.cause, HasSubstr("gone"));
  EXPECT_EQ(leader_.check_calls.load(), 0);  // not elastic: nobody removes it
  EXPECT_TRUE(host_.elections().empty());
}

TEST_F(FollowerSideTest, WithFailoverABrokenStreamStartsAnElection) {
  follow(/*elastic=*/true, /*failover=*/true);
  leader_.endWith(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  side_->reportJoinerGone(9);
  ASSERT_TRUE(eventually([&] { return host_.elections().size() == 1; }));
  EXPECT_THAT(host_.elections()[0], HasSubstr("lost the leader node " + leader_.address() + " (host host-0"));
  EXPECT_EQ(leader_.check_calls.load(), 1);  // still a member: it elects
  side_->leave();                            // the host said it leads: the reader ended
  EXPECT_TRUE(host_.failures().empty());
}

TEST_F(FollowerSideTest, AnElasticFollowerTheLeaderRemovedSaysSoAndTellsNoOne) {
  follow(/*elastic=*/true);
  leader_.removed = "removed at epoch 2 (it was paused)";
  leader_.endWith(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "stale"));
  side_->reportJoinerGone(9);
  ASSERT_TRUE(eventually([&] { return host_.failures().size() == 1; }));
  const auto failure = host_.failures()[0];
  EXPECT_EQ(failure.kind, "detected");
  EXPECT_EQ(failure.cause, "removed at epoch 2 (it was paused)");
  EXPECT_TRUE(failure.node_lost);
  EXPECT_EQ(notices_.tell(true), FailureNotices::Verdict::kRemoved);
}

TEST_F(FollowerSideTest, ASilentLeaderIsLostAtTheSilenceLimit) {
  follow();
  const auto now = CrossClock::now();
  side_->tick(now, /*send=*/true, /*paused=*/false);
  EXPECT_TRUE(host_.failures().empty());
  ASSERT_TRUE(eventually([&] { return leader_.count(&v1::FollowerMessage::has_heartbeat) == 1; }));
  side_->tick(now + std::chrono::milliseconds(NodeSide::kSilenceLimitMs + 1000), false, false);
  ASSERT_EQ(host_.failures().size(), 1u);
  EXPECT_EQ(host_.failures()[0].kind, "leader lost");
  EXPECT_THAT(host_.failures()[0].cause, HasSubstr("silent for"));
}

TEST_F(FollowerSideTest, APausedDaemonDoesNotCountItsPauseAsTheLeadersSilence) {
  follow();
  const auto later = CrossClock::now() + std::chrono::milliseconds(NodeSide::kSilenceLimitMs + 1000);
  side_->tick(later, false, /*paused=*/true);
  EXPECT_TRUE(host_.failures().empty());
  EXPECT_EQ(side_->heardAgeMs(leader_.nodes[0], NodeSide::nowMs(later)), 0);
}

}  // namespace
}  // namespace gradsync::peer
