// SPDX-License-Identifier: Apache-2.0
// Malformed and hostile input on both daemon sockets: every case ends in an
// error status or a closed connection, and the daemon keeps serving.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "handoff/fd_passing.h"
#include "handoff/frame.h"
#include "handoff/shm_layout.h"
#include "proto/gradsync/v1/admin.grpc.pb.h"
#include "proto/gradsync/v1/control.grpc.pb.h"
#include "proto/gradsync/v1/peer.grpc.pb.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

using Stream = grpc::ClientReaderWriter<v1::ClientMessage, v1::DaemonMessage>;

UniqueFd connectUnix(const std::string& path, int type) {
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  return fd;
}

UniqueFd makeMemfd(uint64_t size, bool seal) {
  UniqueFd fd(::memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return UniqueFd();
  if (seal && ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return UniqueFd();
  return fd;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(daemon_.start({}, &error)) << error;
    channel_ = grpc::CreateChannel("unix:" + daemon_.socketPath(), grpc::InsecureChannelCredentials());
    control_ = v1::Control::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);
  }
  void TearDown() override {
    EXPECT_TRUE(alive()) << daemon_.log();
    EXPECT_EQ(daemon_.stop(), 0) << daemon_.log();
  }
  bool alive() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetStatusResponse response;
    return admin_->GetStatus(&context, v1::GetStatusRequest(), &response).ok();
  }
  grpc::Status registerRank(const std::string& job, int rank, int size, v1::RegisterResponse* out,
                            const std::string& token = "t", int local_size = -1) {
    v1::RegisterRequest request;
    request.set_job_id(job);
    request.set_token(token);
    request.set_rank(rank);
    request.set_size(size);
    request.set_local_rank(rank);
    request.set_local_size(local_size < 0 ? size : local_size);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return control_->Register(&context, request, out);
  }
  // Hands over `memfd` with the given credentials; returns the reply code.
  int handoff(uint64_t session_id, const std::string& secret, int memfd, UniqueFd* keep, std::string* message) {
    UniqueFd fd = connectUnix(daemon_.socketPath() + ".handoff", SOCK_SEQPACKET);
    handoff::HandoffHello hello{};
    hello.magic = handoff::kHandoffMagic;
    hello.version = handoff::kHandoffVersion;
    hello.session_id = session_id;
    std::memcpy(hello.secret, secret.data(), std::min(secret.size(), sizeof(hello.secret)));
    EXPECT_TRUE(handoff::sendWithFd(fd.get(), &hello, sizeof(hello), memfd).isOk());
    handoff::HandoffReply reply{};
    Status s = handoff::recvExact(fd.get(), &reply, sizeof(reply), std::chrono::seconds(5));
    if (!s.isOk()) return -1;
    if (message) *message = reply.message;
    if (keep) *keep = std::move(fd);
    return reply.code;
  }
  // A single-rank job with an open session. With `rings`, the arena is big
  // enough for the doorbell rings and offers them (its mapping in `*mapped`).
  std::unique_ptr<Stream> openSession(const std::string& job, grpc::ClientContext* context, UniqueFd* handoff_fd,
                                      bool rings = false, handoff::ArenaControl** mapped = nullptr) {
    v1::RegisterResponse reg;
    EXPECT_TRUE(registerRank(job, 0, 1, &reg).ok());
    const uint64_t size = rings ? 2 * handoff::kControlBytes : 4096;
    UniqueFd memfd = makeMemfd(size, true);
    if (rings) {
      void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
      *mapped = static_cast<handoff::ArenaControl*>(base);
      (*mapped)->magic = handoff::kRingMagic;
    }
    EXPECT_EQ(handoff(reg.session_id(), reg.session_secret(), memfd.get(), handoff_fd, nullptr), 0);
    auto stream = control_->Session(context);
    v1::ClientMessage hello;
    hello.mutable_hello()->set_session_id(reg.session_id());
    hello.mutable_hello()->set_session_secret(reg.session_secret());
    EXPECT_TRUE(stream->Write(hello));
    v1::DaemonMessage ack;
    EXPECT_TRUE(stream->Read(&ack));
    EXPECT_TRUE(ack.has_hello_ack());
    return stream;
  }
  // Sends one Enqueue and returns the Done it gets.
  // An allreduce (sum) of 16 floats named `name`, for roundTrip.
  static v1::Enqueue allreduceOf16(uint64_t handle, const std::string& name) {
    v1::Enqueue e;
    e.set_handle(handle);
    e.set_name(name);
    e.set_type(v1::ALLREDUCE);
    e.set_dtype(v1::FLOAT32);
    e.add_shape(16);
    e.set_op(v1::SUM);
    e.set_length(64);
    return e;
  }
  v1::Done roundTrip(Stream* stream, const v1::Enqueue& enqueue) {
    v1::ClientMessage message;
    *message.mutable_enqueue() = enqueue;
    EXPECT_TRUE(stream->Write(message));
    v1::DaemonMessage reply;
    EXPECT_TRUE(stream->Read(&reply));
    return reply.done();
  }

  DaemonFixture daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Control::Stub> control_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

TEST_F(HostileInputTest, RandomBytesOnBothSockets) {
  std::mt19937 rng(42);
  std::vector<char> junk(65536);
  for (auto& c : junk) c = static_cast<char>(rng());
  for (int i = 0; i < 5; ++i) {
    UniqueFd grpc_fd = connectUnix(daemon_.socketPath(), SOCK_STREAM);
    ASSERT_TRUE(grpc_fd.valid());
    EXPECT_GT(::send(grpc_fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    UniqueFd handoff_fd = connectUnix(daemon_.socketPath() + ".handoff", SOCK_SEQPACKET);
    ASSERT_TRUE(handoff_fd.valid());
    ::send(handoff_fd.get(), junk.data(), 48, MSG_NOSIGNAL);  // right size, wrong magic
    UniqueFd handoff_long = connectUnix(daemon_.socketPath() + ".handoff", SOCK_SEQPACKET);
    ::send(handoff_long.get(), junk.data(), 4000, MSG_NOSIGNAL);  // too long
  }
  EXPECT_TRUE(alive());
}

TEST_F(HostileInputTest, RegistrationChecksIdentity) {
  v1::RegisterResponse reg;
  EXPECT_EQ(registerRank("j", 2, 2, &reg).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(registerRank("bad id", 0, 2, &reg).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(registerRank("j", 0, 0, &reg).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(registerRank("j", 0, 2, &reg, "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Spanning nodes without naming the leader.
  EXPECT_EQ(registerRank("j", 0, 4, &reg, "t", 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(registerRank("j", 0, 2, &reg).ok());
  EXPECT_EQ(registerRank("j", 0, 2, &reg).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(registerRank("j", 1, 2, &reg, "other").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(registerRank("j", 1, 3, &reg).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(HostileInputTest, HandoffRejectsWrongSecretAndUnsealedArena) {
  v1::RegisterResponse reg;
  ASSERT_TRUE(registerRank("h", 0, 1, &reg).ok());
  UniqueFd sealed = makeMemfd(4096, true);
  EXPECT_EQ(handoff(reg.session_id(), std::string(32, 'x'), sealed.get(), nullptr, nullptr), 16);
  EXPECT_EQ(handoff(reg.session_id() + 1, reg.session_secret(), sealed.get(), nullptr, nullptr), 16);
  UniqueFd unsealed = makeMemfd(4096, false);
  std::string message;
  EXPECT_EQ(handoff(reg.session_id(), reg.session_secret(), unsealed.get(), nullptr, &message), 3);
  EXPECT_NE(message.find("F_SEAL_SHRINK"), std::string::npos) << message;
  EXPECT_EQ(handoff(reg.session_id(), reg.session_secret(), -1, nullptr, &message), 3);  // no descriptor
  UniqueFd keep;
  EXPECT_EQ(handoff(reg.session_id(), reg.session_secret(), sealed.get(), &keep, nullptr), 0);
  EXPECT_EQ(handoff(reg.session_id(), reg.session_secret(), sealed.get(), nullptr, &message), 9);  // twice
}

TEST_F(HostileInputTest, SessionNeedsHelloWithSecret) {
  {
    grpc::ClientContext context;
    auto stream = control_->Session(&context);
    v1::ClientMessage m;
    m.mutable_enqueue()->set_name("x");
    stream->Write(m);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    auto stream = control_->Session(&context);
    v1::ClientMessage m;
    m.mutable_hello()->set_session_id(12345);
    m.mutable_hello()->set_session_secret("nope");
    stream->Write(m);
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
}

TEST_F(HostileInputTest, OutOfRangeOffsetsAndBadEnqueuesGetErrors) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  auto stream = openSession("bounds", &context, &handoff_fd);
  v1::Enqueue e;
  e.set_handle(1);
  e.set_name("t");
  e.set_type(v1::ALLREDUCE);
  e.set_dtype(v1::FLOAT32);
  e.add_shape(16);
  e.set_op(v1::SUM);
  e.set_offset(4090);  // 64 bytes from 4090 pass the end of the 4096-byte arena
  e.set_length(64);
  v1::Done done = roundTrip(stream.get(), e);
  EXPECT_EQ(done.handle(), 1u);
  EXPECT_EQ(done.code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE)) << done.message();
  e.set_offset(UINT64_MAX - 10);
  EXPECT_EQ(roundTrip(stream.get(), e).code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE));
  e.set_offset(0);
  e.set_length(65);
  EXPECT_EQ(roundTrip(stream.get(), e).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  e.set_length(64);
  e.set_dtype(static_cast<v1::DataType>(1000));
  EXPECT_EQ(roundTrip(stream.get(), e).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  // An unexpected output grant is ignored; a valid collective still works.
  v1::ClientMessage grant;
  grant.mutable_output_grant()->set_handle(999);
  grant.mutable_output_grant()->set_offset(1 << 30);
  grant.mutable_output_grant()->set_length(1 << 30);
  ASSERT_TRUE(stream->Write(grant));
  e.set_dtype(v1::FLOAT32);
  e.set_handle(2);
  done = roundTrip(stream.get(), e);
  EXPECT_EQ(done.handle(), 2u);
  EXPECT_EQ(done.code(), 0) << done.message();
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// This machine has no GPU (CI): every CUDA request gets the daemon's reason,
// on the hand-off socket and on the session stream, and the session goes on.
TEST_F(HostileInputTest, CudaRequestsOnADaemonWithoutGpus) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  auto stream = openSession("nogpu", &context, &handoff_fd);
  v1::HandoffRequest attach;
  attach.mutable_cuda_attach()->set_device_uuid("GPU-00000000-0000-0000-0000-000000000000");
  attach.mutable_cuda_attach()->add_ready_events(std::string(64, 'e'));
  v1::HandoffResponse response;
  ASSERT_TRUE(handoff::exchangeFrames(handoff_fd.get(), attach, &response, std::chrono::seconds(5)).isOk());
  EXPECT_EQ(response.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_NE(response.message().find("rank 0 (pid"), std::string::npos) << response.message();
  EXPECT_NE(response.message().find("has no GPU"), std::string::npos) << response.message();
  v1::Enqueue e = allreduceOf16(1, "gpu.grad");
  e.mutable_cuda()->set_buffer_id(1);
  v1::Done done = roundTrip(stream.get(), e);
  EXPECT_EQ(done.code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION)) << done.message();
  EXPECT_NE(done.message().find("tensor 'gpu.grad' of rank 0: is a CUDA tensor, but gradsyncd on host"),
            std::string::npos)
      << done.message();
  e.clear_cuda();  // the same tensor on the CPU works
  e.set_handle(2);
  EXPECT_EQ(roundTrip(stream.get(), e).code(), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(HostileInputTest, MalformedHandoffFramesGetErrorsAndTheSessionGoesOn) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  auto stream = openSession("frames", &context, &handoff_fd);
  std::mt19937 rng(7);
  std::string unparsable = handoff::encodeFrame(v1::HandoffRequest()) + "\xff\xff\xff";
  unparsable[4] = 3;  // the header says 3 bytes follow: they do, and do not parse
  const std::vector<std::string> frames = {
      unparsable,
      std::string("abc"),                                       // shorter than a header
      std::string(8, '\xff'),                                   // bad magic
      handoff::encodeFrame(v1::HandoffRequest()).substr(0, 6),  // truncated header
      handoff::encodeFrame(v1::HandoffRequest()) + "tail",      // length disagrees
      handoff::encodeFrame(v1::HandoffRequest()),               // empty request
  };
  for (const std::string& frame : frames) {
    ASSERT_TRUE(handoff::sendWithFd(handoff_fd.get(), frame.data(), frame.size(), -1).isOk());
    std::string reply;
    ASSERT_TRUE(handoff::recvMessage(handoff_fd.get(), &reply, 1 << 18, std::chrono::seconds(5)).isOk());
    v1::HandoffResponse response;
    ASSERT_TRUE(handoff::decodeFrame(reply, &response).isOk());
    EXPECT_NE(response.code(), 0);
  }
  // The session goes on: a collective of it still completes.
  const v1::Done done = roundTrip(stream.get(), allreduceOf16(1, "after.frames"));
  EXPECT_EQ(done.code(), 0) << done.message();
  std::string junk(200000, '\0');  // longer than any frame
  for (auto& c : junk) c = static_cast<char>(rng());
  ::send(handoff_fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
  EXPECT_TRUE(alive());
  stream->WritesDone();
  stream->Finish();
}

TEST_F(HostileInputTest, CorruptDoorbellRingEndsOnlyThatSession) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  handoff::ArenaControl* control = nullptr;
  auto stream = openSession("ring", &context, &handoff_fd, true, &control);
  ASSERT_NE(control, nullptr);
  // A tail far beyond the ring's capacity, then a wake-up.
  control->submit.tail = 100000;
  ::syscall(SYS_futex, &control->submit.tail, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  v1::DaemonMessage reply;
  while (stream->Read(&reply)) {
  }
  EXPECT_FALSE(stream->Finish().ok());
  EXPECT_NE(daemon_.log().find("corrupt submission ring"), std::string::npos) << daemon_.log();
}

TEST_F(HostileInputTest, ClientThatNeverReadsLosesOnlyItsSession) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  auto stream = openSession("no-reader", &context, &handoff_fd);
  // Every bad enqueue is answered by an error Done that this client never
  // reads: the daemon must neither block nor queue without bound. A long
  // name makes each Done carry it (about 500 bytes): 100,000 of them are far
  // more than gRPC's flow-control windows can absorb on the client's side,
  // however fast or slow the daemon (ASan) drains its end.
  v1::ClientMessage bad;
  bad.mutable_enqueue()->set_name(std::string(200, 'b'));
  bad.mutable_enqueue()->set_type(v1::ALLREDUCE);
  bad.mutable_enqueue()->set_dtype(static_cast<v1::DataType>(99));
  int written = 0;
  for (; written < 100000; ++written) {
    bad.mutable_enqueue()->set_handle(written + 1);
    if (!stream->Write(bad)) break;
  }
  EXPECT_LT(written, 100000) << "the daemon never gave up on a client that does not read";
  EXPECT_TRUE(alive());
  // Another job is served meanwhile.
  grpc::ClientContext other_context;
  UniqueFd other_fd;
  auto other = openSession("other-job", &other_context, &other_fd);
  v1::Enqueue e;
  e.set_handle(1);
  e.set_type(v1::BARRIER);
  EXPECT_EQ(roundTrip(other.get(), e).code(), 0);
  other->WritesDone();
  EXPECT_TRUE(other->Finish().ok());
  context.TryCancel();
}

TEST_F(HostileInputTest, OversizedMessageIsRejected) {
  grpc::ClientContext context;
  UniqueFd handoff_fd;
  auto stream = openSession("big", &context, &handoff_fd);
  v1::ClientMessage m;
  m.mutable_enqueue()->set_name(std::string(5 << 20, 'n'));
  stream->Write(m);
  stream->WritesDone();
  v1::DaemonMessage reply;
  while (stream->Read(&reply)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

// The peer service's TCP port takes anything another host could send:
// random bytes, an HTTP/2 preface followed by garbage, and Peer calls with
// nonsense in every field. The daemon keeps serving and exits cleanly.
TEST(HostilePeerInputTest, RandomBytesAndNonsenseCallsOnThePeerPort) {
  DaemonFixture daemon;
  std::string error;
  ASSERT_TRUE(daemon.start({"--peer-address", "127.0.0.1:0"}, &error)) << error;
  const std::string address = daemon.peerAddress();
  ASSERT_FALSE(address.empty()) << daemon.log();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::mt19937 rng(11);
  std::string junk(65536, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  for (const std::string& bytes : {junk, preface + junk, preface + std::string(9, '\xff') + junk}) {
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  auto stub = v1::Peer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const auto deadline = [](grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  };
  for (const size_t id_length : {size_t{8}, size_t{1} << 20}) {
    v1::JoinJobRequest request;  // a node with ranks out of every range
    request.set_job_id(std::string(id_length, 'j'));
    request.set_size(-5);
    request.mutable_node()->add_ranks(-1);
    request.mutable_node()->add_ranks(1 << 30);
    grpc::ClientContext context;
    deadline(&context);
    v1::JoinJobResponse response;
    // Past the peer service's message limit: refused before it is read.
    EXPECT_EQ(stub->JoinJob(&context, request, &response).error_code(),
              id_length == 8 ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::RESOURCE_EXHAUSTED)
        << id_length;
  }
  {
    grpc::ClientContext context;  // a stream whose first message is no hello
    deadline(&context);
    auto stream = stub->Coordinate(&context);
    v1::FollowerMessage message;
    message.mutable_rank_lost()->set_rank(-7);
    stream->Write(message);
    stream->WritesDone();
    v1::LeaderMessage ignored;
    while (stream->Read(&ignored)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    v1::ElectRequest request;
    request.set_job_id("no-such-job");
    request.set_epoch(~uint64_t{0});
    grpc::ClientContext context;
    deadline(&context);
    v1::ElectResponse response;
    EXPECT_EQ(stub->Elect(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Still serving: a well-formed call gets its answer.
  v1::CheckMemberRequest request;
  request.set_job_id("no-such-job");
  grpc::ClientContext context;
  deadline(&context);
  v1::CheckMemberResponse response;
  EXPECT_EQ(stub->CheckMember(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND) << daemon.log();
  EXPECT_EQ(daemon.stop(), 0) << daemon.log();
}

// The TCP ports process `pid` listens on at 127.0.0.1 (its sockets' inodes
// looked up in /proc/<pid>/net/tcp).
std::set<int> loopbackListeningPorts(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::set<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator(proc + "/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  std::ifstream table(proc + "/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state != "0A" || inodes.count(inode) == 0 || local.rfind("0100007F:", 0) != 0) continue;  // LISTEN
    ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

// The data plane's UCX ports take anything another host could send while a
// job runs across two daemons: random bytes, and a connection that sends
// half a header and closes. The job's next steps still sum correctly, and
// both daemons exit cleanly (the fixtures check).
TEST(HostilePeerInputTest, RandomBytesOnTheUcxPortsOfARunningJob) {
  const std::map<std::string, std::string> loopback_only = {{"UCX_NET_DEVICES", "lo"}, {"UCX_TLS", "tcp,self"}};
  DaemonFixture a, b;
  std::string error;
  ASSERT_TRUE(a.startWrapped({}, loopback_only, {"--peer-address", "127.0.0.1:0"}, &error)) << error;
  ASSERT_TRUE(b.startWrapped({}, loopback_only, {"--peer-address", "127.0.0.1:0"}, &error)) << error;
  const std::string go = a.dir() + "/go";
  auto ranks = launchAcross({&a, &b}, "ucx-hostile", {"training_steps", "2", go, "3"}, {0, 1}, {}, loopback_only);
  for (auto& rank : ranks) {
    ASSERT_TRUE(waitFor([&] { return rank.log().find("STEPS DONE") != std::string::npos || !rank.running(); },
                        scaled(std::chrono::seconds(60))))
        << rank.log();
    ASSERT_TRUE(rank.running()) << rank.log() << a.log() << b.log();
  }
  const std::string peer = a.peerAddress();
  std::set<int> ucx_ports = loopbackListeningPorts(a.process().pid());
  ucx_ports.erase(std::stoi(peer.substr(peer.rfind(':') + 1)));
  ASSERT_FALSE(ucx_ports.empty()) << "no UCX listener of the job found on 127.0.0.1";
  std::mt19937 rng(29);
  std::string junk(1 << 16, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  for (int port : ucx_ports) {
    for (const std::string& bytes : {junk, junk.substr(0, 3), std::string(64, '\xff') + junk}) {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << port;
      ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    }
  }
  std::ofstream(go).put('1');  // the ranks run 3 more steps over the same data plane
  std::string report;
  EXPECT_TRUE(allSucceed(ranks, scaled(std::chrono::seconds(60)), &report)) << report << a.log() << b.log();
  EXPECT_EQ(a.stop(), 0) << a.log();
  EXPECT_EQ(b.stop(), 0) << b.log();
}

}  // namespace
}  // namespace gradsync::testutil
