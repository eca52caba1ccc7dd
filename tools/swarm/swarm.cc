// SPDX-License-Identifier: Apache-2.0
// The swarm: one process that plays many follower daemons (one rank each,
// or --ranks-per-follower) against one real leader (gradsyncd, whose own rank runs the worker's
// empty_steps scenario). It joins them all, opens their coordination
// streams, sends their heartbeats, and runs steps of empty allreduces
// (the control plane alone), then prints one line of figures: formation
// time, step latency, the leader's CPU per step, threads and memory, and
// the coordination bytes of a follower per step.
//
// With --candidate, one real follower daemon (its rank 1) is in the job
// too, the swarm's ranks follow it, and no steps run: once the job formed,
// the leader is killed and the swarm's followers elect the candidate
// (swarm_election.h), printing the election's figures instead.
//
//   swarm --leader HOST:PORT --leader-pid PID --job ID --token T
//         --followers N [--tensors 161] [--steps 20] [--timeout-s 300]
//         [--ranks-per-follower 1] [--part-delay-ms 0] [--step-delay-ms 0]
//         [--candidate HOST:PORT --candidate-pid PID]
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "tools/swarm/process_sample.h"
#include "tools/swarm/swarm_election.h"
#include "tools/swarm/swarm_follower.h"

namespace gradsync::swarm {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string leader;
  int leader_pid = 0;
  SwarmJob job;
  int followers = 0;
  int tensors = 161;
  int steps = 20;
  int timeout_s = 300;
  std::chrono::milliseconds step_delay{0};  // before each step after the first, the swarm's ranks wait
  std::string candidate;                    // a real follower daemon holding rank 1: an election, no steps
  int candidate_pid = 0;
  int first_rank = 1;  // the swarm's first rank (after the real daemons')
};

bool parse(int argc, char** argv, Options* options) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  auto get = [&](const std::string& name, const std::string& fallback) {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  };
  options->leader = get("--leader", "");
  options->leader_pid = std::stoi(get("--leader-pid", "0"));
  options->job.job_id = get("--job", "");
  options->job.token = get("--token", "");
  options->followers = std::stoi(get("--followers", "0"));
  options->tensors = std::stoi(get("--tensors", "161"));
  options->steps = std::stoi(get("--steps", "20"));
  options->timeout_s = std::stoi(get("--timeout-s", "300"));
  options->job.part_delay = std::chrono::milliseconds(std::stoi(get("--part-delay-ms", "0")));
  options->step_delay = std::chrono::milliseconds(std::stoi(get("--step-delay-ms", "0")));
  options->job.ranks_per_follower = std::stoi(get("--ranks-per-follower", "1"));
  options->candidate = get("--candidate", "");
  options->candidate_pid = std::stoi(get("--candidate-pid", "0"));
  options->first_rank = options->candidate.empty() ? 1 : 2;
  options->job.size = options->followers * options->job.ranks_per_follower + options->first_rank;
  return !options->leader.empty() && !options->job.job_id.empty() && options->followers > 0 && options->steps > 2 &&
         options->job.ranks_per_follower > 0;
}

// What the followers report, and the main thread waits for.
class Progress {
 public:
  FollowerEvents events() {
    FollowerEvents e;
    e.step_done = [this] {
      MutexLock lock(mutex_);
      ++done_;
      cv_.notify_all();
    };
    e.failed = [this](const std::string& cause) {
      MutexLock lock(mutex_);
      if (!over_ && ++failures_ <= 5) std::fprintf(stderr, "swarm: %s\n", cause.c_str());
      if (failure_.empty() && !over_) failure_ = cause;
      cv_.notify_all();
    };
    return e;
  }
  // The steps are over: what ends the job from now on (the leader's rank
  // leaving first) is no failure.
  void over() {
    MutexLock lock(mutex_);
    over_ = true;
  }
  void reset() {
    MutexLock lock(mutex_);
    done_ = 0;
  }
  // Waits until `count` followers finished the step; false on a failure or
  // at `deadline`.
  bool waitFor(int count, Clock::time_point deadline, std::string* why) {
    MutexLock lock(mutex_);
    const bool ok =
        cv_.wait_until(lock, deadline, [&]() GS_REQUIRES(mutex_) { return done_ >= count || !failure_.empty(); });
    if (!failure_.empty()) {
      *why = failure_;
      return false;
    }
    if (!ok) *why = std::to_string(count - done_) + " followers were still waiting for their step's responses";
    return ok;
  }

 private:
  Mutex mutex_;
  CondVar cv_;
  int done_ GS_GUARDED_BY(mutex_) = 0;
  bool over_ GS_GUARDED_BY(mutex_) = false;
  int failures_ GS_GUARDED_BY(mutex_) = 0;
  std::string failure_ GS_GUARDED_BY(mutex_);
};

// JoinJob for every follower at once (the leader answers them all once the
// last one joined); a call the leader refuses while it does not know the
// job yet is made again. Their cross ranks, by follower.
bool joinAll(const std::vector<std::unique_ptr<SwarmFollower>>& followers,
             const std::vector<std::unique_ptr<v1::Peer::Stub>>& stubs, Clock::time_point deadline,
             std::vector<int>* cross_ranks, bool* rounds, uint64_t* epoch, std::string* why) {
  const size_t n = followers.size();
  cross_ranks->assign(n, -1);
  Mutex mutex;
  CondVar cv;
  size_t answered = 0;        // for good: joined or refused
  std::vector<size_t> again;  // refused as too early
  std::vector<grpc::Status> statuses(n);
  std::vector<v1::JoinJobResponse> responses(n);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<v1::JoinJobRequest> requests(n);
  const auto ask = [&](size_t i) {
    contexts[i] = std::make_unique<grpc::ClientContext>();
    contexts[i]->set_deadline(std::chrono::system_clock::now() +
                              std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    requests[i] = followers[i]->joinRequest();
    stubs[i]->async()->JoinJob(contexts[i].get(), &requests[i], &responses[i], [&, i](grpc::Status status) {
      MutexLock lock(mutex);
      if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
        again.push_back(i);
      } else {
        statuses[i] = std::move(status);
        ++answered;
      }
      cv.notify_all();
    });
  };
  for (size_t i = 0; i < n; ++i) ask(i);
  MutexLock lock(mutex);
  while (answered < n) {
    if (!cv.wait_until(lock, deadline, [&]() GS_REQUIRES(mutex) { return answered == n || !again.empty(); })) {
      // The calls in flight end at the same deadline.
      cv.wait(lock, [&]() GS_REQUIRES(mutex) { return answered + again.size() == n; });
      *why = "the job did not form in time";
      return false;
    }
    if (again.empty()) continue;
    std::vector<size_t> retry;
    retry.swap(again);
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (size_t i : retry) ask(i);
    lock.lock();
  }
  for (size_t i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      *why = "rank " + std::to_string(followers[i]->rank()) + " could not join: " + statuses[i].error_message();
      return false;
    }
    for (const auto& node : responses[i].nodes()) {
      if (node.ranks_size() > 0 && node.ranks(0) == followers[i]->rank()) (*cross_ranks)[i] = node.cross_rank();
    }
  }
  // Rounds through the leader where every node offers them (the swarm's do;
  // the leader's not with --steady-state leader).
  const auto& nodes = responses[0].nodes();
  *epoch = responses[0].epoch();
  *rounds = std::all_of(nodes.begin(), nodes.end(), [](const v1::NodeInfo& n) { return n.leader_rounds(); });
  return true;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * values.size()))];
}

int run(const Options& o) {
  Progress progress;
  FollowerEvents events = progress.events();
  std::vector<std::unique_ptr<SwarmFollower>> followers;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Peer::Stub>> stubs;
  for (int i = 0; i < o.followers; ++i) {
    followers.push_back(std::make_unique<SwarmFollower>(o.job, o.first_rank + i * o.job.ranks_per_follower, &events));
    channels.push_back(nodeChannel(o.leader, i));
    stubs.push_back(v1::Peer::NewStub(channels.back()));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  const auto join_start = Clock::now();
  std::vector<int> cross_ranks;
  std::string why;
  // The leader's threads while the followers join (the most seen).
  std::atomic<bool> joining{true};
  std::atomic<int> threads_joining{0};
  std::thread sampler([&] {
    while (joining.load()) {
      threads_joining = std::max(threads_joining.load(), sample(o.leader_pid).threads);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  bool rounds = false;
  uint64_t epoch = 0;
  const bool joined = joinAll(followers, stubs, deadline, &cross_ranks, &rounds, &epoch, &why);
  joining = false;
  sampler.join();
  if (!joined) {
    std::fprintf(stderr, "swarm: %s\n", why.c_str());
    return 1;
  }
  const double formed_s = std::chrono::duration<double>(Clock::now() - join_start).count();
  for (int i = 0; i < o.followers; ++i) followers[i]->open(stubs[i].get(), cross_ranks[i], rounds);

  // Heartbeats every second, as a follower daemon sends them; held ids
  // past the hold limit to the leader (tick).
  std::atomic<bool> beating{true};
  std::thread beats([&] {
    while (beating.load()) {
      const int64_t now_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
      for (auto& f : followers) f->heartbeat(now_ms);
      for (int i = 0; i < 10 && beating.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (auto& f : followers) f->tick();
      }
    }
  });

  if (!o.candidate.empty()) {
    // The candidate's own stream is open, and the heartbeats went once.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    progress.over();  // the leader's end is no failure from now on
    const int code = electAfterLeaderLoss(
        {o.candidate, o.candidate_pid, o.leader_pid, epoch, o.followers + 2, std::chrono::seconds(60)}, o.job,
        followers);
    beating = false;
    beats.join();
    for (auto& f : followers) f->close();
    for (auto& f : followers) f->waitDone(std::chrono::seconds(10));
    return code;
  }
  constexpr int kWarmup = 2;  // the first step negotiates in full; the cache serves the rest
  std::vector<double> step_ms;
  double first_step_ms = 0;  // negotiated in full, rank by rank
  ProcessSample before;
  std::vector<SwarmFollower::Traffic> traffic_before(followers.size());
  bool ok = true;
  for (int step = 0; step < o.steps && ok; ++step) {
    if (step == kWarmup) {
      before = sample(o.leader_pid);
      for (size_t i = 0; i < followers.size(); ++i) traffic_before[i] = followers[i]->traffic();
    }
    progress.reset();
    const auto start = Clock::now();
    if (step > 0) std::this_thread::sleep_for(o.step_delay);
    for (auto& f : followers) f->submitStep(o.tensors);
    ok = progress.waitFor(o.followers, deadline, &why);
    const double took_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (step == 0) first_step_ms = took_ms;
    if (step >= kWarmup) step_ms.push_back(took_ms);
  }
  const ProcessSample after = sample(o.leader_pid);
  progress.over();
  beating = false;
  beats.join();
  for (auto& f : followers) f->close();
  for (auto& f : followers) f->waitDone(std::chrono::seconds(10));
  if (!ok) {
    std::fprintf(stderr, "swarm: %s\n", why.c_str());
    return 1;
  }
  const double measured = static_cast<double>(step_ms.size());
  double rx = 0, tx = 0, largest = 0;
  for (size_t i = 0; i < followers.size(); ++i) {
    const auto t = followers[i]->traffic();
    rx += static_cast<double>(t.bytes_received - traffic_before[i].bytes_received);
    tx += static_cast<double>(t.bytes_sent - traffic_before[i].bytes_sent);
    largest = std::max(largest, static_cast<double>(t.largest_received));
  }
  std::printf(
      "SWARM followers=%d ranks_per_follower=%d rounds=%d tensors=%d steps=%d formed_s=%.2f first_step_ms=%.1f "
      "step_ms_median=%.2f "
      "step_ms_p90=%.2f "
      "step_ms_max=%.2f "
      "leader_cpu_ms_per_step=%.2f leader_threads_joining=%d leader_threads=%d leader_rss_mib=%.1f "
      "leader_peak_rss_mib=%.1f leader_egress_bytes_per_step=%.0f follower_rx_bytes_per_step=%.0f "
      "follower_tx_bytes_per_step=%.0f largest_message=%.0f\n",
      o.followers, o.job.ranks_per_follower, rounds ? 1 : 0, o.tensors, o.steps, formed_s, first_step_ms,
      percentile(step_ms, 0.5), percentile(step_ms, 0.9), percentile(step_ms, 1.0),
      (after.cpu_seconds - before.cpu_seconds) * 1e3 / measured, threads_joining.load(), after.threads, after.rss_mib,
      after.peak_rss_mib, rx / measured, rx / measured / o.followers, tx / measured / o.followers, largest);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace gradsync::swarm

int main(int argc, char** argv) {
  gradsync::swarm::Options options;
  if (!gradsync::swarm::parse(argc, argv, &options)) {
    std::fprintf(stderr,
                 "usage: swarm --leader HOST:PORT --leader-pid PID --job ID --token T --followers N "
                 "[--tensors 161] [--steps 20 (> 2)] [--timeout-s 300] [--part-delay-ms 0] [--step-delay-ms 0] "
                 "[--ranks-per-follower 1] [--candidate HOST:PORT --candidate-pid PID]\n");
    return 64;
  }
  // A connection per follower.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &files);
  }
  return gradsync::swarm::run(options);
}
