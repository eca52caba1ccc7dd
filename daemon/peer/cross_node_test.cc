// SPDX-License-Identifier: Apache-2.0
// Two CrossNodes of one job in one process, each behind a Peer service of
// its own on loopback (a stand-in for the daemon's, routing to it): they
// form, carry a follower's request to the leader and the leader's batch to
// the follower, and pass on failures. What the hooks receive is recorded.
#include "daemon/peer/cross_node.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "daemon/coordinator/request_wire.h"
#include "daemon/coordinator/test_requests.h"
#include "daemon/peer/coordinate_reactor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::peer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::chrono_literals;

grpc::Status toGrpc(const Status& status) {
  return status.isOk() ? grpc::Status::OK
                       : grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

// What a CrossNode's hooks were called with.
class Recorder {
 public:
  using Failure = CrossNode::Failure;
  void remoteRequest(int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
    MutexLock lock(mutex_);
    requests_.push_back({rank, enqueue.name(), epoch});
    cv_.notify_all();
  }
  void batch(const std::vector<coordinator::Response>& batch, uint64_t sequence) {
    MutexLock lock(mutex_);
    // A held follower stops reading its leader's stream (up to 30 s).
    cv_.wait_for(lock, 30s, [&]() GS_REQUIRES(mutex_) { return !hold_batches_; });
    for (const auto& r : batch) batches_.push_back({sequence, r.name});
    cv_.notify_all();
  }
  void holdBatches(bool hold) {
    MutexLock lock(mutex_);
    hold_batches_ = hold;
    cv_.notify_all();
  }
  void failure(const Failure& failure) {
    MutexLock lock(mutex_);
    failures_.push_back(failure);
    cv_.notify_all();
  }
  // Waits (up to 10 s) until `done` holds of the record.
  bool waitFor(const std::function<bool()>& done) {
    MutexLock lock(mutex_);
    return cv_.wait_for(lock, 10s, [&]() GS_REQUIRES(mutex_) { return done(); });
  }
  struct Request {
    int rank;
    std::string name;
    uint64_t epoch;
  };
  std::vector<Request> requests() {
    MutexLock lock(mutex_);
    return requests_;
  }
  std::vector<std::pair<uint64_t, std::string>> batches() {
    MutexLock lock(mutex_);
    return batches_;
  }
  std::vector<Failure> failures() {
    MutexLock lock(mutex_);
    return failures_;
  }
  size_t requestCount() GS_NO_THREAD_SAFETY_ANALYSIS { return requests_.size(); }  // inside waitFor only
  size_t batchCount() GS_NO_THREAD_SAFETY_ANALYSIS { return batches_.size(); }
  size_t failureCount() GS_NO_THREAD_SAFETY_ANALYSIS { return failures_.size(); }

 private:
  Mutex mutex_;
  CondVar cv_;
  std::vector<Request> requests_ GS_GUARDED_BY(mutex_);
  std::vector<std::pair<uint64_t, std::string>> batches_ GS_GUARDED_BY(mutex_);
  std::vector<Failure> failures_ GS_GUARDED_BY(mutex_);
  bool hold_batches_ GS_GUARDED_BY(mutex_) = false;
};

// The daemon's Peer service reduced to one job.
class OneJobPeerService final : public v1::Peer::WithCallbackMethod_Coordinate<v1::Peer::Service> {
 public:
  void serve(CrossNode* node) { node_.store(node); }
  Outbox::Limits follower_limits;
  std::atomic<int> members_calls{0};
  std::atomic<int> abort_calls{0};  // AbortJob calls this node received
  // Answers joins as a leader from before versions would: no protocol.
  std::atomic<bool> answer_without_protocol{false};
  grpc::Status JoinJob(grpc::ServerContext*, const v1::JoinJobRequest* request,
                       v1::JoinJobResponse* response) override {
    CrossNode* node = node_.load();
    if (node == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job here yet");
    std::promise<StatusOr<v1::JoinJobResponse>> promise;
    auto future = promise.get_future();
    node->acceptJoin(*request,
                     [&promise](StatusOr<v1::JoinJobResponse> answer) { promise.set_value(std::move(answer)); });
    auto answer = future.get();
    if (answer.isOk()) *response = std::move(answer).value();
    if (answer_without_protocol.load()) {
      response->clear_protocol_version();
      response->clear_oldest_protocol_version();
    }
    return toGrpc(answer.status());
  }
  grpc::ServerBidiReactor<v1::FollowerMessage, v1::LeaderMessage>* Coordinate(
      grpc::CallbackServerContext* context) override {
    auto resolve = [this](const v1::FollowerMessage& hello, std::shared_ptr<FollowerStream> stream,
                          std::unique_ptr<FollowerSession>* session) {
      CrossNode* node = node_.load();
      if (node == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job here");
      return node->serveFollower(hello, std::move(stream), session);
    };
    return new CoordinateReactor(context, std::move(resolve), follower_limits);
  }
  grpc::Status Members(grpc::ServerContext*, const v1::MembersRequest* request,
                       v1::MembersResponse* response) override {
    CrossNode* node = node_.load();
    if (node == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job here");
    members_calls.fetch_add(1);
    auto part = node->membersPart(*request);
    if (part.isOk()) *response = std::move(part).value();
    return toGrpc(part.status());
  }
  grpc::Status AbortJob(grpc::ServerContext*, const v1::AbortJobRequest* request, v1::AbortJobResponse*) override {
    abort_calls.fetch_add(1);
    CrossNode* node = node_.load();
    return node == nullptr ? grpc::Status(grpc::StatusCode::NOT_FOUND, "no job here")
                           : toGrpc(node->acceptAbort(*request));
  }

 private:
  std::atomic<CrossNode*> node_{nullptr};
};

// One daemon's side of the job: its Peer service, its CrossNode and what
// the CrossNode's hooks were told.
struct Daemon {
  OneJobPeerService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  Recorder recorder;
  std::unique_ptr<CrossNode> cross;
  size_t membership_part_bytes = kMembershipPartBytes;
  ProtocolRange protocol;  // the versions it says it speaks
  std::chrono::seconds join_timeout = 10s;
  int size = 2;  // ranks of the job, one per node

  void listen() {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    // As the daemon's peer service (daemon/exe/daemon.cc): the followers'
    // links ping every second, which gRPC's defaults answer with GOAWAY
    // ("too_many_pings") after a few seconds.
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  void create(const std::string& leader_address, const std::string& hostname) {
    CrossNodeOptions options;
    options.job_id = "cross-unit";
    options.token = "secret";
    options.size = size;
    options.self_address = address;
    options.leader_address = leader_address;
    options.hostname = hostname;
    options.join_timeout = join_timeout;
    options.membership_part_bytes = membership_part_bytes;
    options.protocol = protocol;
    CrossNode::Hooks hooks;
    hooks.on_batch = [this](std::vector<coordinator::Response> batch, uint64_t sequence, uint64_t, uint64_t) {
      recorder.batch(batch, sequence);
    };
    hooks.on_remote_request = [this](int rank, const v1::Enqueue& enqueue, uint64_t epoch) {
      recorder.remoteRequest(rank, enqueue, epoch);
    };
    hooks.on_remote_repeats = [this](std::vector<coordinator::Repeat> repeats, uint64_t epoch) {
      for (const auto& repeat : repeats) {
        for (size_t i = 0; i < repeat.ranks.size(); ++i) {
          recorder.remoteRequest(repeat.ranks[i], coordinator::enqueueOf(repeat.request(i)), epoch);
        }
      }
    };
    // The job announces nothing it is handed (server::Job::failJob, detected_here false).
    hooks.on_failure = [this](const CrossNode::Failure& failure) { recorder.failure(failure); };
    cross = std::make_unique<CrossNode>(std::move(options), std::move(hooks));
    service.serve(cross.get());
  }
  // A test that ends early (a failed assertion) must not wait on the
  // server's open streams.
  ~Daemon() { stop(); }
  void stop() {
    if (cross) cross->abortTransfers("the test ends");
    if (server) server->Shutdown(std::chrono::system_clock::now() + 2s);
    service.serve(nullptr);
    cross.reset();
    server.reset();
  }
};

coordinator::Request request(int rank, const std::string& name) { return coordinator::testing::allreduce(rank, name); }

class CrossNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leader_.service.follower_limits = follower_limits_;
    leader_.membership_part_bytes = membership_part_bytes_;
    leader_.listen();
    follower_.listen();
    leader_.create(leader_.address, "leader-host");
    follower_.create(leader_.address, "follower-host");
    leader_.cross->start({0}, {1000});
    follower_.cross->start({1}, {2000});
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!(leader_.cross->formed() && follower_.cross->formed()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_TRUE(leader_.cross->formed() && follower_.cross->formed()) << "the job did not form within 10 s";
  }
  void TearDown() override {
    follower_.stop();
    leader_.stop();
  }
  Outbox::Limits follower_limits_;  // what the leader lets wait for a follower
  size_t membership_part_bytes_ = kMembershipPartBytes;
  Daemon leader_;
  Daemon follower_;
};

// A leader that sends the membership one node per part.
class CrossNodePartsTest : public CrossNodeTest {
 protected:
  CrossNodePartsTest() { membership_part_bytes_ = 1; }
};

// A leader that lets few messages wait for a follower.
class CrossNodeFanOutTest : public CrossNodeTest {
 protected:
  CrossNodeFanOutTest() { follower_limits_ = {64, size_t{4} << 20}; }
};

// Daemons whose peer protocols cannot work together (a rolling update
// half done): the join is refused, and both nodes fail the job at once with
// an error that names both versions and both nodes.
TEST(CrossNodeProtocolTest, AFollowerOfAnOlderProtocolIsRefusedAtJoinAndBothSidesSaySo) {
  Daemon leader, follower;
  follower.protocol = {1, 1};  // forged: a daemon of an older release
  leader.listen();
  follower.listen();
  leader.create(leader.address, "leader-host");
  follower.create(leader.address, "follower-host");
  const auto start = std::chrono::steady_clock::now();
  leader.cross->start({0}, {1000});
  follower.cross->start({1}, {2000});
  ASSERT_TRUE(leader.recorder.waitFor([&] { return leader.recorder.failureCount() > 0; }));
  ASSERT_TRUE(follower.recorder.waitFor([&] { return follower.recorder.failureCount() > 0; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (Daemon* d : {&leader, &follower}) {
    const std::string cause = d->recorder.failures().front().cause;
    EXPECT_THAT(cause, HasSubstr("speaks peer protocol 1 (works with 1 and later)"));
    EXPECT_THAT(cause, HasSubstr("the leader (" + leader.address + ") speaks peer protocol 2"));
    EXPECT_THAT(cause, HasSubstr("follower-host"));
  }
  EXPECT_FALSE(leader.cross->formed());
  follower.stop();
  leader.stop();
}

// A leader from before versions does not check: the newer follower refuses
// it, naming both.
TEST(CrossNodeProtocolTest, AFollowerRefusesALeaderFromBeforeVersions) {
  Daemon leader, follower;
  leader.protocol = {2, 1};  // accepts the follower; answers as an old leader would
  leader.service.answer_without_protocol = true;
  leader.listen();
  follower.listen();
  leader.create(leader.address, "leader-host");
  follower.create(leader.address, "follower-host");
  leader.cross->start({0}, {1000});
  follower.cross->start({1}, {2000});
  ASSERT_TRUE(follower.recorder.waitFor([&] { return follower.recorder.failureCount() > 0; }));
  const std::string cause = follower.recorder.failures().front().cause;
  EXPECT_THAT(cause, HasSubstr("the leader at " + leader.address + " speaks peer protocol 1 (works with 1 and later)"));
  EXPECT_THAT(cause, HasSubstr("this node (" + follower.address + ") speaks peer protocol 2"));
  follower.stop();
  leader.stop();
}

// A follower that joins and then never opens its coordination stream: the
// leader's first batch fails at the join deadline naming that node.
TEST(CrossNodeStreamTest, AFollowerThatNeverOpensItsStreamIsNamed) {
  Daemon leader;
  leader.join_timeout = 2s;
  leader.listen();
  leader.create(leader.address, "leader-host");
  leader.cross->start({0}, {1000});
  v1::JoinJobRequest join;
  join.set_job_id("cross-unit");
  join.set_token("secret");
  join.set_size(2);
  join.mutable_node()->set_peer_address("127.0.0.1:9");
  join.mutable_node()->set_hostname("silent-host");
  join.mutable_node()->add_ranks(1);
  ProtocolRange{}.stamp(&join);
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(leader.address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::JoinJobResponse joined;
  ASSERT_TRUE(stub->JoinJob(&context, join, &joined).ok());
  ASSERT_TRUE(leader.cross->formed());
  const auto start = std::chrono::steady_clock::now();
  const Status sent = leader.cross->broadcast({}, 1, leader.cross->epoch(), 64 << 20);
  EXPECT_EQ(sent.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(sent.message(), HasSubstr("not every node opened its coordination stream within 2 s: node 127.0.0.1:9 "
                                        "(host silent-host, ranks [1]) joined but never opened it"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  leader.stop();
}

// A job of `count` nodes, one rank each, formed (host-0 leads); empty when
// it did not form within 10 s.
std::vector<std::unique_ptr<Daemon>> formJob(int count) {
  std::vector<std::unique_ptr<Daemon>> nodes;
  for (int i = 0; i < count; ++i) {
    nodes.push_back(std::make_unique<Daemon>());
    nodes.back()->size = count;
    nodes.back()->listen();
  }
  for (int i = 0; i < count; ++i) nodes[i]->create(nodes[0]->address, "host-" + std::to_string(i));
  for (int i = 0; i < count; ++i) nodes[i]->cross->start({i}, {1000 + i});
  const auto formed = [&] {
    for (const auto& n : nodes) {
      if (!n->cross->formed()) return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!formed() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  if (!formed()) {
    for (int i = count - 1; i >= 0; --i) nodes[i]->stop();
    nodes.clear();
  }
  return nodes;
}

int abortCalls(const std::vector<std::unique_ptr<Daemon>>& nodes) {
  int calls = 0;
  for (const auto& n : nodes) calls += n->service.abort_calls.load();
  return calls;
}

// A leader and four followers; one follower falls silent (its
// housekeeping stops ticking, so it sends no heartbeat) and the leader, past
// the silence limit, declares it lost. Only the leader detected the loss: it
// tells each follower once, and the followers, which only heard of it, pass
// it on to no one: no AbortJob among them and no failure back to the
// leader.
TEST(CrossNodeFailureTest, ALossHeardFromTheLeaderIsPassedOnToNoOne) {
  constexpr int kNodes = 5;
  constexpr int kSilent = 4;
  std::vector<std::unique_ptr<Daemon>> nodes = formJob(kNodes);
  ASSERT_FALSE(nodes.empty()) << "the job did not form within 10 s";

  // Real time: a heartbeat is dated when it arrives.
  const auto limit = CrossClock::now() + std::chrono::milliseconds(CrossNode::kSilenceLimitMs + 5000);
  while (nodes[0]->recorder.failureCount() == 0 && CrossClock::now() < limit) {
    for (int i = 0; i < kNodes; ++i) {
      if (i != kSilent) nodes[i]->cross->tick(CrossClock::now());
    }
    std::this_thread::sleep_for(250ms);
  }
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(nodes[i]->recorder.waitFor([&] { return nodes[i]->recorder.failureCount() >= 1; })) << "node " << i;
    const auto first = nodes[i]->recorder.failures()[0];
    EXPECT_TRUE(first.node_lost) << "node " << i;
    EXPECT_THAT(first.cause, HasSubstr("host-4")) << "node " << i;
    if (i == 0) {  // detected there
      EXPECT_EQ(first.heard_from, "");
    } else {
      EXPECT_THAT(first.heard_from, HasSubstr("host-0")) << "node " << i;
    }
  }
  std::this_thread::sleep_for(1s);  // time for any echo to arrive
  EXPECT_EQ(abortCalls(nodes), 0) << "AbortJob calls among followers that only heard of the loss";
  EXPECT_EQ(nodes[0]->recorder.failures().size(), 1u) << "the leader's own detection, then failures sent back to it";
  for (int i = kNodes - 1; i >= 0; --i) nodes[i]->stop();
}

// A leader and eight followers; the leader falls silent (no heartbeats)
// and every follower detects its loss at about the same moment. Each tells
// its relays (1, 2 and 4 places on among the followers) once: 8 x 3 AbortJob
// calls, not 8 x 7 (every follower telling every other), which would grow
// as F^2 with the job.
TEST(CrossNodeFailureTest, ALeaderLostByEveryFollowerIsToldInLog2FCallsEach) {
  constexpr int kNodes = 9;
  constexpr int kFollowers = kNodes - 1;
  std::vector<std::unique_ptr<Daemon>> nodes = formJob(kNodes);
  ASSERT_FALSE(nodes.empty()) << "the job did not form within 10 s";
  nodes[0]->cross->jobStopped();  // it would tell what it hears on streams that are open here
  const auto all_failed = [&] {
    for (int i = 1; i < kNodes; ++i) {
      if (nodes[i]->recorder.failureCount() == 0) return false;
    }
    return true;
  };
  const auto limit = CrossClock::now() + std::chrono::milliseconds(CrossNode::kSilenceLimitMs + 5000);
  while (!all_failed() && CrossClock::now() < limit) {
    for (int i = 1; i < kNodes; ++i) nodes[i]->cross->tick(CrossClock::now());
    std::this_thread::sleep_for(250ms);
  }
  for (int i = 1; i < kNodes; ++i) {
    ASSERT_TRUE(nodes[i]->recorder.waitFor([&] { return nodes[i]->recorder.failureCount() >= 1; })) << "node " << i;
    const auto first = nodes[i]->recorder.failures()[0];
    EXPECT_TRUE(first.node_lost) << "node " << i;
    EXPECT_THAT(first.cause, HasSubstr("leader")) << "node " << i;
  }
  std::this_thread::sleep_for(1s);  // time for every call to arrive
  EXPECT_LE(abortCalls(nodes), kFollowers * 3) << "AbortJob calls among the followers";
  EXPECT_GT(abortCalls(nodes), 0);
  for (int i = kNodes - 1; i >= 0; --i) nodes[i]->stop();
}

// One follower alone loses the leader (a cut link, say: only it keeps the
// time, so only it finds the leader silent) while the others still count
// it heard; the leader here passes nothing on. The follower's notice goes
// around the leader, passed on once by each follower that hears it, and
// reaches every follower, each naming the loss and who told it.
TEST(CrossNodeFailureTest, ANoticeOfOneFollowerReachesEveryFollowerThroughTheRelays) {
  constexpr int kNodes = 9;
  constexpr int kFollowers = kNodes - 1;
  constexpr int kDetector = 3;
  std::vector<std::unique_ptr<Daemon>> nodes = formJob(kNodes);
  ASSERT_FALSE(nodes.empty()) << "the job did not form within 10 s";
  nodes[0]->cross->jobStopped();  // it tells the followers nothing it hears
  const auto limit = CrossClock::now() + std::chrono::milliseconds(CrossNode::kSilenceLimitMs + 5000);
  while (nodes[kDetector]->recorder.failureCount() == 0 && CrossClock::now() < limit) {
    nodes[kDetector]->cross->tick(CrossClock::now());
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_GE(nodes[kDetector]->recorder.failureCount(), 1u) << "the leader was not found silent";
  EXPECT_THAT(nodes[kDetector]->recorder.failures()[0].cause, HasSubstr("lost the leader at"));
  EXPECT_EQ(nodes[kDetector]->recorder.failures()[0].heard_from, "") << "detected there";
  for (int i = 1; i < kNodes; ++i) {
    if (i == kDetector) continue;
    ASSERT_TRUE(nodes[i]->recorder.waitFor([&] { return nodes[i]->recorder.failureCount() >= 1; })) << "node " << i;
    const auto first = nodes[i]->recorder.failures()[0];
    EXPECT_TRUE(first.node_lost) << "node " << i;
    EXPECT_THAT(first.cause, HasSubstr("lost the leader at")) << "node " << i;
    EXPECT_FALSE(first.heard_from.empty()) << "node " << i;
    EXPECT_THAT(first.heard_from, Not(HasSubstr("the leader"))) << "node " << i;
  }
  std::this_thread::sleep_for(1s);
  EXPECT_LE(abortCalls(nodes), kFollowers * 3) << "AbortJob calls among the followers";
  EXPECT_GT(abortCalls(nodes), 0);
  for (int i = kNodes - 1; i >= 0; --i) nodes[i]->stop();
}

// A leader and four followers; one follower's data plane loses a node
// (its job reports it: failedHere, node lost). It tells the leader alone,
// which tells the other three on their streams before they can hear of it
// any other way: so a follower whose ranks exit on hearing it cannot close
// cleanly before the leader knows, and become the job's cause there. No
// AbortJob among the followers, no echo.
TEST(CrossNodeFailureTest, ALossAFollowerDetectedReachesTheOthersThroughTheLeaderAlone) {
  constexpr int kNodes = 5;
  constexpr int kDetector = 2;
  std::vector<std::unique_ptr<Daemon>> nodes = formJob(kNodes);
  ASSERT_FALSE(nodes.empty()) << "the job did not form within 10 s";
  nodes[kDetector]->cross->failedHere("job 'cross-unit': the ring to host-4 broke", /*node_lost=*/true);
  for (int i = 0; i < kNodes; ++i) {
    if (i == kDetector) continue;
    ASSERT_TRUE(nodes[i]->recorder.waitFor([&] { return nodes[i]->recorder.failureCount() >= 1; })) << "node " << i;
    const auto first = nodes[i]->recorder.failures()[0];
    EXPECT_TRUE(first.node_lost) << "node " << i;
    EXPECT_THAT(first.cause, HasSubstr("the ring to host-4 broke")) << "node " << i;
    EXPECT_THAT(first.heard_from, HasSubstr(i == 0 ? "host-2" : "the leader")) << "node " << i;
  }
  std::this_thread::sleep_for(1s);  // time for any echo to arrive
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(nodes[i]->recorder.failures().size(), i == kDetector ? 0u : 1u) << "node " << i << ": an echo";
  }
  EXPECT_EQ(abortCalls(nodes), 0) << "AbortJob calls among the followers";
  for (int i = kNodes - 1; i >= 0; --i) nodes[i]->stop();
}

// A leader and four followers; a rank leaves on one follower, whose job
// reports it (failedHere). The leader hears it from that follower and, its
// peer side alone (the jobs here announce nothing), tells the other three
// on their streams: each node fails once, naming the rank, with no AbortJob
// (a rank, not a node, was lost) and nothing sent back.
TEST(CrossNodeFailureTest, ARankLostOnAFollowerReachesTheOthersThroughTheLeaderOnce) {
  constexpr int kNodes = 5;
  constexpr int kReporter = 2;
  std::vector<std::unique_ptr<Daemon>> nodes = formJob(kNodes);
  ASSERT_FALSE(nodes.empty()) << "the job did not form within 10 s";
  nodes[kReporter]->cross->failedHere("job 'cross-unit': rank 2 (pid 1002, host host-2) disconnected",
                                      /*node_lost=*/false);
  for (int i = 0; i < kNodes; ++i) {
    if (i == kReporter) continue;
    ASSERT_TRUE(nodes[i]->recorder.waitFor([&] { return nodes[i]->recorder.failureCount() >= 1; })) << "node " << i;
    const auto first = nodes[i]->recorder.failures()[0];
    EXPECT_FALSE(first.node_lost) << "node " << i;
    EXPECT_THAT(first.cause, HasSubstr("rank 2 (pid 1002, host host-2) disconnected")) << "node " << i;
    EXPECT_THAT(first.heard_from, HasSubstr(i == 0 ? "host-2" : "the leader")) << "node " << i;
  }
  std::this_thread::sleep_for(1s);  // time for any echo to arrive
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(nodes[i]->recorder.failures().size(), i == kReporter ? 0u : 1u) << "node " << i << ": an echo";
  }
  EXPECT_EQ(abortCalls(nodes), 0);
  for (int i = kNodes - 1; i >= 0; --i) nodes[i]->stop();
}

TEST_F(CrossNodeTest, TwoNodesFormWithTheRankZeroNodeLeading) {
  EXPECT_TRUE(leader_.cross->isLeader());
  EXPECT_FALSE(follower_.cross->isLeader());
  for (CrossNode* node : {leader_.cross.get(), follower_.cross.get()}) {
    const auto members = node->members();
    ASSERT_EQ(members.size(), 2u);
    EXPECT_EQ(members[0].hostname(), "leader-host");
    EXPECT_THAT(members[0].ranks(), ::testing::ElementsAre(0));
    EXPECT_EQ(members[1].hostname(), "follower-host");
    EXPECT_THAT(members[1].ranks(), ::testing::ElementsAre(1));
  }
  EXPECT_EQ(leader_.cross->selfCrossRank(), 0);
  EXPECT_EQ(follower_.cross->selfCrossRank(), 1);
  EXPECT_TRUE(leader_.cross->missingRanks().empty());
}

TEST_F(CrossNodeTest, AFollowersRequestReachesTheLeaderAndTheLeadersBatchTheFollower) {
  follower_.cross->forward(1, coordinator::enqueueOf(request(1, "grad")), follower_.cross->epoch());
  ASSERT_TRUE(leader_.recorder.waitFor([&] { return leader_.recorder.requestCount() == 1; }));
  const auto requests = leader_.recorder.requests();
  EXPECT_EQ(requests[0].rank, 1);
  EXPECT_EQ(requests[0].name, "grad");
  EXPECT_EQ(requests[0].epoch, follower_.cross->epoch());

  coordinator::Response response;
  response.name = "grad";
  response.type = v1::ALLREDUCE;
  response.ranks = {0, 1};
  response.requests = {request(0, "grad"), request(1, "grad")};
  ASSERT_TRUE(leader_.cross->broadcast({response}, 1, leader_.cross->epoch(), 64 << 20).isOk());
  ASSERT_TRUE(follower_.recorder.waitFor([&] { return follower_.recorder.batchCount() == 1; }));
  EXPECT_EQ(follower_.recorder.batches()[0], std::make_pair(uint64_t{1}, std::string("grad")));
  EXPECT_TRUE(follower_.recorder.failures().empty());
}

// (Announced at once: the follower's stream may attach after it, and is
// told then.)
TEST_F(CrossNodeTest, AFailureTheLeaderAnnouncesFailsTheJobAtTheFollower) {
  leader_.cross->failedHere("rank 0 (pid 1000, host leader-host) disconnected", /*node_lost=*/false);
  ASSERT_TRUE(follower_.recorder.waitFor([&] { return follower_.recorder.failureCount() >= 1; }));
  const auto failure = follower_.recorder.failures()[0];
  EXPECT_THAT(failure.cause, HasSubstr("rank 0 (pid 1000, host leader-host) disconnected"));
  EXPECT_FALSE(failure.node_lost);
  EXPECT_THAT(failure.heard_from, HasSubstr("the leader"));
}

// A follower's failure reaches the leader as heard from that follower, and
// as news to the others: the leader is the one that tells them.
TEST_F(CrossNodeTest, AFailureAFollowerAnnouncesIsTheLeadersToPassOn) {
  follower_.cross->failedHere("rank 1 (pid 2000, host follower-host) disconnected", /*node_lost=*/false);
  ASSERT_TRUE(leader_.recorder.waitFor([&] { return leader_.recorder.failureCount() >= 1; }));
  const auto failure = leader_.recorder.failures()[0];
  EXPECT_THAT(failure.cause, HasSubstr("rank 1 (pid 2000, host follower-host) disconnected"));
  EXPECT_FALSE(failure.node_lost);
  EXPECT_THAT(failure.heard_from, HasSubstr("follower-host"));
}

TEST_F(CrossNodeTest, AFollowerSilentPastTheLimitIsLostAtTheLeader) {
  // The leader's housekeeping ticks each second; the follower's never do,
  // so it sends no heartbeat and, past the silence limit, is lost. (Its
  // stream may attach, and be heard, after the first ticks: they go on
  // until the leader notices, 50 ms apart.)
  const auto start = CrossClock::now();
  for (int s = 0; s <= 60 && leader_.recorder.failureCount() == 0; ++s) {
    leader_.cross->tick(start + std::chrono::seconds(s));
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(leader_.recorder.waitFor([&] { return leader_.recorder.failureCount() >= 1; }));
  const auto failure = leader_.recorder.failures()[0];
  EXPECT_TRUE(failure.node_lost);
  EXPECT_THAT(failure.cause, HasSubstr("follower-host"));
  EXPECT_THAT(failure.cause, HasSubstr("silent for"));
  // The follower hears that its job failed.
  ASSERT_TRUE(follower_.recorder.waitFor([&] { return follower_.recorder.failureCount() >= 1; }));
}

TEST_F(CrossNodeTest, NodesThatTickStayMembersPastTheSilenceLimit) {
  // Real time: a heartbeat is dated when it arrives.
  const auto end = CrossClock::now() + std::chrono::milliseconds(CrossNode::kSilenceLimitMs + 1500);
  while (CrossClock::now() < end) {
    follower_.cross->tick(CrossClock::now());
    leader_.cross->tick(CrossClock::now());
    std::this_thread::sleep_for(250ms);
  }
  const auto leader_failures = leader_.recorder.failures();
  const auto follower_failures = follower_.recorder.failures();
  EXPECT_TRUE(leader_failures.empty()) << leader_failures[0].cause;
  EXPECT_TRUE(follower_failures.empty()) << follower_failures[0].cause;
}

TEST_F(CrossNodeFanOutTest, AFollowerThatStopsReadingIsCutWithAnErrorNamingIt) {
  // The follower's reader stops at the first batch; the leader goes on
  // broadcasting (never waiting) until the follower's outbox overflows once
  // the transport's buffers are full.
  follower_.recorder.holdBatches(true);
  const std::string padding(8 << 10, 'x');
  bool cut = false;
  for (uint64_t i = 1; i <= 20000 && !cut; ++i) {
    coordinator::Response response;
    response.name = "grad." + std::to_string(i) + "." + padding;  // never cached: each is new
    response.type = v1::ALLREDUCE;
    response.ranks = {0, 1};
    response.requests = {request(0, response.name), request(1, response.name)};
    const auto started = std::chrono::steady_clock::now();
    Status sent = leader_.cross->broadcast({response}, i, leader_.cross->epoch(), 64 << 20);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 1s) << "a broadcast waited for the follower";
    if (!sent.isOk()) break;
    cut = !leader_.recorder.failures().empty();
  }
  ASSERT_TRUE(leader_.recorder.waitFor([&] { return leader_.recorder.failureCount() >= 1; }));
  const auto failure = leader_.recorder.failures()[0];
  EXPECT_TRUE(failure.node_lost);
  EXPECT_THAT(failure.cause, HasSubstr("cut off"));
  EXPECT_THAT(failure.cause, HasSubstr("follower-host"));
  EXPECT_THAT(failure.cause, HasSubstr("fell behind the leader"));
  follower_.recorder.holdBatches(false);
}

}  // namespace
}  // namespace gradsync::peer

namespace gradsync::peer {
namespace {

TEST_F(CrossNodePartsTest, AFollowerReadsTheMembershipTheLeaderSentInParts) {
  const auto leader_view = leader_.cross->members();
  const auto follower_view = follower_.cross->members();
  ASSERT_EQ(follower_view.size(), 2u);
  ASSERT_EQ(leader_view.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(follower_view[i].SerializeAsString(), leader_view[i].SerializeAsString()) << "node " << i;
  }
  EXPECT_EQ(follower_view[1].hostname(), "follower-host");
  EXPECT_EQ(follower_.cross->selfCrossRank(), 1);
  EXPECT_EQ(leader_.service.members_calls.load(), 1);  // the second node: one node per part
  // The job works as one sent whole.
  follower_.cross->forward(1, coordinator::enqueueOf(request(1, "parted")), follower_.cross->epoch());
  ASSERT_TRUE(leader_.recorder.waitFor([&] { return leader_.recorder.requestCount() == 1; }));
  EXPECT_EQ(leader_.recorder.requests()[0].name, "parted");
}

}  // namespace
}  // namespace gradsync::peer
