// SPDX-License-Identifier: Apache-2.0
// A Job of one daemon without a daemon: two ranks' sessions with arenas
// (memfds mapped here) whose streams are recorders, submitting as the
// client would. Checks the results in the arenas and the Dones, and that a
// rank's loss ends what the other rank waits for.
#include "daemon/server/job.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr uint64_t kArenaBytes = 1 << 20;

// The Session RPC's stream as a recorder of what the daemon writes.
class RecordingStream : public SessionWriter {
 public:
  void SendInitialMetadata() override {}
  bool NextMessageSize(uint32_t* size) override {
    *size = 0;
    return false;
  }
  bool Read(v1::ClientMessage*) override { return false; }
  using SessionWriter::Write;
  bool Write(const v1::DaemonMessage& message, grpc::WriteOptions) override {
    MutexLock lock(mutex_);
    messages_.push_back(message);
    cv_.notify_all();
    return true;
  }
  // The first message `matches` accepts (taken from the record), or nullopt
  // after `timeout`.
  std::optional<v1::DaemonMessage> take(const std::function<bool(const v1::DaemonMessage&)>& matches,
                                        std::chrono::milliseconds timeout = 10s) {
    MutexLock lock(mutex_);
    std::optional<v1::DaemonMessage> found;
    const auto have = [&]() GS_REQUIRES(mutex_) {
      for (auto it = messages_.begin(); it != messages_.end(); ++it) {
        if (!matches(*it)) continue;
        found = *it;
        messages_.erase(it);
        return true;
      }
      return false;
    };
    cv_.wait_for(lock, timeout, have);
    return found;
  }
  std::optional<v1::Done> done(uint64_t handle, std::chrono::milliseconds timeout = 10s) {
    auto m = take([&](const v1::DaemonMessage& m) { return m.has_done() && m.done().handle() == handle; }, timeout);
    return m ? std::optional<v1::Done>(m->done()) : std::nullopt;
  }
  std::optional<v1::OutputRequest> outputRequest(uint64_t handle) {
    auto m = take(
        [&](const v1::DaemonMessage& m) { return m.has_output_request() && m.output_request().handle() == handle; });
    return m ? std::optional<v1::OutputRequest>(m->output_request()) : std::nullopt;
  }

 private:
  Mutex mutex_;
  CondVar cv_;
  std::deque<v1::DaemonMessage> messages_ GS_GUARDED_BY(mutex_);
};

// One rank: its session, arena (mapped here as the client maps it) and stream.
struct Rank {
  std::shared_ptr<Session> session;
  uint8_t* memory = nullptr;  // the arena as the client sees it
  RecordingStream stream;
};

class JobTest : public ::testing::Test {
 protected:
  // The job's spec (an elastic job's fixture changes it).
  virtual JobSpec spec() const {
    JobSpec spec;
    spec.job_id = "unit";
    spec.size = 2;
    spec.local_size = 2;
    return spec;
  }
  void SetUp() override {
    JobLimits limits;
    limits.hostname = "test-host";
    job_ = std::make_unique<Job>(spec(), limits, &pool_);
    for (int r = 0; r < 2; ++r) ASSERT_NO_FATAL_FAILURE(addRank(r));
  }
  void TearDown() override {
    job_.reset();  // stops the executor before the sessions go
    for (auto& rank : ranks_) {
      if (!rank.session) continue;
      rank.session->detachStream();
      ::munmap(rank.memory, kArenaBytes);
    }
  }
  // Rank `r` (ranks_[r]) registers: as a rank, or (`joiner`) as a new rank
  // waiting to join an elastic job.
  void addRank(int r, bool joiner = false) {
    UniqueFd fd(::memfd_create("arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    ASSERT_EQ(::ftruncate(fd.get(), kArenaBytes), 0);
    ASSERT_EQ(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
    void* memory = ::mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    ASSERT_NE(memory, MAP_FAILED);
    auto arena = handoff::ShmArena::map(std::move(fd), kArenaBytes);
    ASSERT_TRUE(arena.isOk()) << arena.status().toString();
    RankIdentity identity{"unit", joiner ? -1 : r, 2, joiner ? -1 : r, 2, "test-host", "test", false};
    Rank& rank = ranks_[r];
    rank.session = std::make_shared<Session>(r + 1, SessionSecret{}, identity);
    rank.memory = static_cast<uint8_t*>(memory);
    ASSERT_TRUE(rank.session->attachArena(std::move(arena).value(), Budget::Lease(), ::getpid()).isOk());
    ASSERT_TRUE(rank.session->attachStream(&rank.stream, nullptr));
    ASSERT_TRUE((joiner ? job_->addJoiner(rank.session) : job_->addSession(rank.session)).isOk());
  }
  static v1::Enqueue floats(v1::CollectiveType type, uint64_t handle, const std::string& name, uint64_t offset,
                            int64_t count) {
    v1::Enqueue e;
    e.set_handle(handle);
    e.set_name(name);
    e.set_type(type);
    e.set_dtype(v1::FLOAT32);
    e.add_shape(count);
    e.set_op(v1::SUM);
    e.set_offset(offset);
    e.set_length(static_cast<uint64_t>(count) * sizeof(float));
    return e;
  }
  void write(int r, uint64_t offset, const std::vector<float>& values) {
    std::memcpy(ranks_[r].memory + offset, values.data(), values.size() * sizeof(float));
  }
  std::vector<float> read(int r, uint64_t offset, size_t count) {
    std::vector<float> values(count);
    std::memcpy(values.data(), ranks_[r].memory + offset, count * sizeof(float));
    return values;
  }
  void grant(int r, uint64_t handle, uint64_t offset, uint64_t length) {
    v1::OutputGrant g;
    g.set_handle(handle);
    g.set_offset(offset);
    g.set_length(length);
    job_->grant(*ranks_[r].session, g);
  }

  executor::ReducePool pool_{2};
  std::unique_ptr<Job> job_;
  Rank ranks_[3];  // the third: a joiner, where a test adds one
};

TEST_F(JobTest, TwoRanksAllreduceInTheirArenas) {
  write(0, 4096, {1, 2, 3, 4});
  write(1, 8192, {10, 20, 30, 40});
  job_->submit(ranks_[0].session, floats(v1::ALLREDUCE, 7, "grad", 4096, 4));
  job_->submit(ranks_[1].session, floats(v1::ALLREDUCE, 9, "grad", 8192, 4));
  auto done0 = ranks_[0].stream.done(7);
  auto done1 = ranks_[1].stream.done(9);
  ASSERT_TRUE(done0 && done1);
  EXPECT_EQ(done0->code(), 0) << done0->message();
  EXPECT_EQ(done1->code(), 0) << done1->message();
  EXPECT_EQ(read(0, 4096, 4), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(read(1, 8192, 4), (std::vector<float>{11, 22, 33, 44}));
  v1::JobInfo info = job_->info();
  EXPECT_EQ(info.operations_done(), 1u);
  EXPECT_EQ(info.bytes_done(), 32u);
}

TEST_F(JobTest, AnAllgatherWritesIntoTheOutputsTheRanksGrant) {
  write(0, 0, {1, 2});
  write(1, 0, {3, 4, 5});
  job_->submit(ranks_[0].session, floats(v1::ALLGATHER, 1, "gathered", 0, 2));
  job_->submit(ranks_[1].session, floats(v1::ALLGATHER, 1, "gathered", 0, 3));
  for (int r = 0; r < 2; ++r) {
    auto request = ranks_[r].stream.outputRequest(1);
    ASSERT_TRUE(request) << "rank " << r << " was not asked for its output";
    EXPECT_EQ(request->length(), 5 * sizeof(float));
    EXPECT_EQ(request->shape(0), 5);
    grant(r, 1, 65536, request->length());
  }
  for (int r = 0; r < 2; ++r) {
    auto done = ranks_[r].stream.done(1);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->code(), 0) << done->message();
    EXPECT_EQ(read(r, 65536, 5), (std::vector<float>{1, 2, 3, 4, 5}));
  }
}

TEST_F(JobTest, ALostRankEndsTheWaitForOutputGrantsAtOnce) {
  // Rank 1 is asked for its output and dies before it grants: rank 0's
  // allgather fails naming it, long before the grant deadline (30 s).
  job_->submit(ranks_[0].session, floats(v1::ALLGATHER, 3, "ag", 0, 2));
  job_->submit(ranks_[1].session, floats(v1::ALLGATHER, 3, "ag", 0, 2));
  auto request0 = ranks_[0].stream.outputRequest(3);
  ASSERT_TRUE(request0 && ranks_[1].stream.outputRequest(3));
  grant(0, 3, 4096, request0->length());
  // gradsyncctl tensors shows the wait and whom it waits for.
  const v1::JobTensors waiting = job_->tensors(Clock::now());
  ASSERT_EQ(waiting.awaiting_output_size(), 1);
  EXPECT_EQ(waiting.awaiting_output(0).name(), "ag");
  EXPECT_THAT(waiting.awaiting_output(0).granted_ranks(), ::testing::ElementsAre(0));
  EXPECT_THAT(waiting.awaiting_output(0).waiting_ranks(), ::testing::ElementsAre(1));

  const auto start = std::chrono::steady_clock::now();
  job_->removeSession(*ranks_[1].session, "disconnected (killed by the test)");
  auto done = ranks_[0].stream.done(3, 5s);
  ASSERT_TRUE(done) << "rank 0's allgather still waits";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(done->code(), 0);
  EXPECT_THAT(done->message(), HasSubstr("rank 1"));
  EXPECT_THAT(done->message(), HasSubstr("disconnected (killed by the test)"));
  EXPECT_EQ(done->detail().tensor_name(), "ag");
}

TEST_F(JobTest, ARankThatLeavesFailsTheCollectivesOthersWaitIn) {
  job_->submit(ranks_[0].session, floats(v1::ALLREDUCE, 5, "w", 0, 4));
  ASSERT_FALSE(ranks_[0].stream.done(5, 100ms)) << "an allreduce of one rank of two completed";
  EXPECT_FALSE(job_->removeSession(*ranks_[1].session, "disconnected (hand-off connection closed)"));
  auto done = ranks_[0].stream.done(5);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->code(), static_cast<int>(StatusCode::kAborted)) << done->message();
  EXPECT_THAT(done->message(), HasSubstr("rank 1 (pid " + std::to_string(::getpid()) + ", host test-host)"));
  EXPECT_THAT(done->message(), HasSubstr("hand-off connection closed"));
  // The job has failed: a later collective fails at once, saying why.
  job_->submit(ranks_[0].session, floats(v1::ALLREDUCE, 6, "w2", 0, 4));
  auto later = ranks_[0].stream.done(6);
  ASSERT_TRUE(later);
  EXPECT_THAT(later->message(), HasSubstr("rank 1"));
  EXPECT_TRUE(job_->removeSession(*ranks_[0].session, "left the job", /*crashed=*/false));
}

TEST_F(JobTest, ARequestOutsideItsArenaFailsAloneAndTheJobGoesOn) {
  job_->submit(ranks_[0].session, floats(v1::ALLREDUCE, 1, "bad", kArenaBytes - 8, 4));
  auto refused = ranks_[0].stream.done(1);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), static_cast<int>(StatusCode::kOutOfRange)) << refused->message();
  EXPECT_THAT(refused->message(), HasSubstr("job 'unit' tensor 'bad' of rank 0: range [1048568, +16) lies outside"));
  EXPECT_EQ(refused->detail().tensor_name(), "bad");
  // The other rank never submitted it; the same name still works.
  write(0, 0, {1, 1});
  write(1, 0, {2, 2});
  job_->submit(ranks_[0].session, floats(v1::ALLREDUCE, 2, "good", 0, 2));
  job_->submit(ranks_[1].session, floats(v1::ALLREDUCE, 2, "good", 0, 2));
  for (int r = 0; r < 2; ++r) {
    auto done = ranks_[r].stream.done(2);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->code(), 0) << done->message();
    EXPECT_EQ(read(r, 0, 2), (std::vector<float>{3, 3}));
  }
}

// An elastic job of two ranks on one daemon that goes on with one.
class ElasticJobTest : public JobTest {
 protected:
  JobSpec spec() const override {
    JobSpec spec = JobTest::spec();
    spec.elastic = true;
    spec.min_size = 1;
    return spec;
  }
  static v1::Enqueue inEpoch(v1::Enqueue enqueue, uint64_t epoch) {
    enqueue.set_epoch(epoch);
    return enqueue;
  }
  static v1::Enqueue commit(uint64_t handle, uint64_t epoch) {
    v1::Enqueue e;
    e.set_handle(handle);
    e.set_name("commit");
    e.set_type(v1::BARRIER);
    e.set_epoch(epoch);
    e.set_commit(true);
    return e;
  }
  std::optional<v1::MembershipChange> place(int r) {
    auto m = ranks_[r].stream.take([](const v1::DaemonMessage& m) { return m.has_membership_change(); });
    return m ? std::optional<v1::MembershipChange>(m->membership_change()) : std::nullopt;
  }
};

TEST_F(ElasticJobTest, ALostRankMovesTheJobToANewEpochWithTheSurvivor) {
  job_->submit(ranks_[0].session, inEpoch(floats(v1::ALLREDUCE, 5, "w", 0, 2), 1));
  ASSERT_FALSE(ranks_[0].stream.done(5, 100ms)) << "an allreduce of one rank of two completed";
  EXPECT_FALSE(job_->removeSession(*ranks_[1].session, "disconnected (killed by the test)"));
  // What rank 0 waited in fails as retriable, and it is told its place.
  auto failed = ranks_[0].stream.done(5);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->code(), static_cast<int>(StatusCode::kAborted)) << failed->message();
  EXPECT_TRUE(failed->detail().membership_changed()) << failed->message();
  EXPECT_THAT(failed->message(), HasSubstr("epoch 1 -> 2"));
  auto change = place(0);
  ASSERT_TRUE(change);
  EXPECT_EQ(change->epoch(), 2u);
  EXPECT_EQ(change->rank(), 0);
  EXPECT_EQ(change->size(), 1);
  const v1::JobInfo info = job_->info();
  EXPECT_TRUE(info.healthy());
  EXPECT_EQ(info.epoch(), 2u);
  EXPECT_EQ(info.size(), 1);
  // A collective of the old epoch is refused (retriable); one of the new
  // epoch runs with the survivor alone.
  job_->submit(ranks_[0].session, inEpoch(floats(v1::ALLREDUCE, 6, "w", 0, 2), 1));
  auto stale = ranks_[0].stream.done(6);
  ASSERT_TRUE(stale);
  EXPECT_TRUE(stale->detail().membership_changed());
  EXPECT_THAT(stale->message(), HasSubstr("belongs to epoch 1, the job is at epoch 2"));
  write(0, 0, {4, 5});
  job_->submit(ranks_[0].session, inEpoch(floats(v1::ALLREDUCE, 7, "w", 0, 2), 2));
  auto done = ranks_[0].stream.done(7);
  ASSERT_TRUE(done);
  EXPECT_EQ(done->code(), 0) << done->message();
  EXPECT_EQ(read(0, 0, 2), (std::vector<float>{4, 5}));
}

TEST_F(ElasticJobTest, AJoinerBecomesARankAtTheNextCommitBarrier) {
  ASSERT_NO_FATAL_FAILURE(addRank(2, /*joiner=*/true));
  EXPECT_EQ(job_->info().size(), 2);  // waiting, not a rank yet
  for (int r = 0; r < 2; ++r) job_->submit(ranks_[r].session, commit(1, 1));
  for (int r = 0; r < 2; ++r) {
    auto done = ranks_[r].stream.done(1);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->code(), 0) << done->message();
    EXPECT_TRUE(done->epoch_changed()) << "rank " << r << " was not told that ranks joined at its commit";
  }
  for (int r = 0; r < 3; ++r) {
    auto change = place(r);
    ASSERT_TRUE(change) << "rank " << r << " was not told its place";
    EXPECT_EQ(change->epoch(), 2u);
    EXPECT_EQ(change->rank(), r);  // the joiner after the survivors
    EXPECT_EQ(change->size(), 3);
  }
  EXPECT_EQ(job_->info().size(), 3);
  EXPECT_EQ(job_->info().commits(), 1u);
}

TEST_F(ElasticJobTest, AJobThatIsNotElasticTakesNoJoiner) {
  JobSpec fixed = JobTest::spec();
  fixed.job_id = "fixed";
  Job job(fixed, JobLimits{}, &pool_);
  auto joiner =
      std::make_shared<Session>(9, SessionSecret{}, RankIdentity{"fixed", -1, 2, -1, 2, "test-host", "test", false});
  const Status refused = job.addJoiner(joiner);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("is not elastic"));
}

}  // namespace
}  // namespace gradsync::server
