// SPDX-License-Identifier: Apache-2.0
#include "tools/swarm/swarm_election.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "base/mutex.h"
#include "tools/swarm/process_sample.h"

namespace gradsync::swarm {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The votes in flight and their answers.
class Tally {
 public:
  void answered(const grpc::Status& status, const v1::ElectResponse& response, Clock::time_point start) {
    MutexLock lock(mutex_);
    ++answers_;
    if (status.ok()) {
      if (won_ == 0) first_won_ms_ = msSince(start);
      ++won_;
      new_epoch_ = response.change().epoch();
    } else if (refusal_.empty()) {
      refusal_ = status.error_message();
    }
    last_ms_ = msSince(start);
    cv_.notify_all();
  }
  bool waitAll(size_t votes, Clock::time_point deadline) {
    MutexLock lock(mutex_);
    return cv_.wait_until(lock, deadline, [&]() GS_REQUIRES(mutex_) { return answers_ == votes; });
  }
  void print(const ElectionSetup& setup, size_t votes, const ProcessSample& before, const ProcessSample& after,
             int threads_most, double other_call_ms) {
    MutexLock lock(mutex_);
    std::printf(
        "ELECTION daemons=%d voters=%zu majority=%d won=%zu refused=%zu new_epoch=%llu new_leader_ms=%.1f "
        "all_answered_ms=%.1f candidate_threads_before=%d candidate_threads_most=%d candidate_cpu_ms=%.1f "
        "other_call_ms=%.1f\n",
        setup.daemons, votes, setup.daemons / 2 + 1, won_, answers_ - won_, static_cast<unsigned long long>(new_epoch_),
        first_won_ms_, last_ms_, before.threads, threads_most, (after.cpu_seconds - before.cpu_seconds) * 1e3,
        other_call_ms);
    if (!refusal_.empty()) std::fprintf(stderr, "swarm: a vote was refused: %s\n", refusal_.c_str());
    std::fflush(stdout);
  }
  size_t won() {
    MutexLock lock(mutex_);
    return won_;
  }

 private:
  Mutex mutex_;
  CondVar cv_;
  size_t answers_ GS_GUARDED_BY(mutex_) = 0;
  size_t won_ GS_GUARDED_BY(mutex_) = 0;
  uint64_t new_epoch_ GS_GUARDED_BY(mutex_) = 0;
  double first_won_ms_ GS_GUARDED_BY(mutex_) = 0;
  double last_ms_ GS_GUARDED_BY(mutex_) = 0;
  std::string refusal_ GS_GUARDED_BY(mutex_);
};

// One voter's call: a connection of its own to the candidate, as each
// follower daemon has.
struct Vote {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Peer::Stub> stub;
  grpc::ClientContext context;
  v1::ElectRequest request;
  v1::ElectResponse response;
};

// A Members call to the candidate (it leads nothing yet: a refusal, from
// the pool that serves AbortJob, CheckMember and Members): how long until
// its answer, -1 when none came.
double otherCallMs(const ElectionSetup& setup, const SwarmJob& job, v1::Peer::Stub* stub) {
  v1::MembersRequest request;
  request.set_job_id(job.job_id);
  request.set_token(job.token);
  request.set_epoch(setup.epoch);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::MembersResponse response;
  const auto start = Clock::now();
  const grpc::Status status = stub->Members(&context, request, &response);
  const bool answered = status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
                        status.error_code() != grpc::StatusCode::UNAVAILABLE;
  if (!answered) std::fprintf(stderr, "swarm: Members during the election: %s\n", status.error_message().c_str());
  return answered ? msSince(start) : -1;
}

}  // namespace

int electAfterLeaderLoss(const ElectionSetup& setup, const SwarmJob& job,
                         const std::vector<std::unique_ptr<SwarmFollower>>& voters) {
  std::vector<std::unique_ptr<Vote>> votes;
  for (size_t i = 0; i < voters.size(); ++i) {
    auto vote = std::make_unique<Vote>();
    vote->channel = nodeChannel(setup.candidate, static_cast<int>(i));
    vote->stub = v1::Peer::NewStub(vote->channel);
    vote->request.set_job_id(job.job_id);
    vote->request.set_token(job.token);
    vote->request.set_epoch(setup.epoch);
    vote->request.set_voter_address(voters[i]->address());
    votes.push_back(std::move(vote));
  }
  // Connected before the leader goes, as a follower daemon's channel to a
  // candidate it probed is.
  for (auto& vote : votes) vote->channel->WaitForConnected(std::chrono::system_clock::now() + setup.timeout);

  const ProcessSample before = sample(setup.candidate_pid);
  std::atomic<bool> electing{true};
  std::atomic<int> threads_most{before.threads};
  std::thread sampler([&] {
    while (electing.load()) {
      threads_most = std::max(threads_most.load(), sample(setup.candidate_pid).threads);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  Tally tally;
  const auto start = Clock::now();
  ::kill(setup.leader_pid, SIGKILL);
  for (auto& vote : votes) {
    Vote* v = vote.get();
    v->context.set_deadline(std::chrono::system_clock::now() + setup.timeout);
    v->stub->async()->Elect(&v->context, &v->request, &v->response,
                            [&tally, v, start](grpc::Status status) { tally.answered(status, v->response, start); });
  }
  // Another call to the candidate while the votes are held: answered as
  // fast as without them (the sync pool is not the votes').
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double other_call_ms = otherCallMs(setup, job, votes.front()->stub.get());
  const bool all = tally.waitAll(votes.size(), Clock::now() + setup.timeout + std::chrono::seconds(5));
  electing = false;
  sampler.join();
  const ProcessSample after = sample(setup.candidate_pid);
  if (!all) {
    std::fprintf(stderr, "swarm: the votes were not all answered in time\n");
    for (auto& vote : votes) vote->context.TryCancel();
    tally.waitAll(votes.size(), Clock::now() + std::chrono::seconds(10));
    return 1;
  }
  tally.print(setup, votes.size(), before, after, threads_most.load(), other_call_ms);
  return tally.won() + 1 >= static_cast<size_t>(setup.daemons / 2 + 1) ? 0 : 1;
}

}  // namespace gradsync::swarm
