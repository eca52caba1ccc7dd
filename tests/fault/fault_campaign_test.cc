// SPDX-License-Identifier: Apache-2.0
// The fault campaign: round after round, a 4-rank job loops over collectives
// on 2 or 3 daemons and one fault is injected at a random moment (SIGKILL
// or SIGSTOP of a rank, of a follower's daemon or of the leader's daemon).
// Every round checks that every rank not targeted ends within kBound with
// an error naming the cause, that no daemon that was not targeted died or
// stopped answering, and that a new job runs on all daemons afterwards.
//
// Seeded: GRADSYNC_CAMPAIGN_SEED (default 20261122) and
// GRADSYNC_CAMPAIGN_ROUNDS (default 6) replay a campaign exactly (timing
// aside); scripts/fault_campaign.sh runs 100 rounds.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <regex>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"

namespace gradsync::testutil {
namespace {

using Seconds = std::chrono::duration<double>;
using SteadyClock = std::chrono::steady_clock;

// Stall deadline 5 s (a stopped rank), heartbeat silence 6 s (a stopped
// daemon), each checked every 100 ms; a killed rank or daemon is noticed at
// once. The bound leaves room for a loaded machine.
constexpr auto kBound = std::chrono::seconds(15);
const std::vector<std::string> kDaemonFlags = {"--peer-address", "127.0.0.1:0", "--join-timeout-seconds", "10",
                                               "--stall-warning-seconds", "1", "--stall-deadline-seconds", "5"};

enum class Fault { kRankKill, kRankStop, kFollowerDaemonKill, kFollowerDaemonStop, kLeaderDaemonKill, kLeaderDaemonStop };
constexpr int kFaultKinds = 6;

const char* faultName(Fault f) {
  switch (f) {
    case Fault::kRankKill: return "SIGKILL rank";
    case Fault::kRankStop: return "SIGSTOP rank";
    case Fault::kFollowerDaemonKill: return "SIGKILL follower daemon";
    case Fault::kFollowerDaemonStop: return "SIGSTOP follower daemon";
    case Fault::kLeaderDaemonKill: return "SIGKILL leader daemon";
    case Fault::kLeaderDaemonStop: return "SIGSTOP leader daemon";
  }
  return "?";
}

// The "ERROR code: message" line a campaign_loop rank printed ("" if none).
std::string errorLine(const Process& rank) {
  std::smatch match;
  const std::string log = rank.log();
  static const std::regex pattern("ERROR [0-9]+: (.*)");
  return std::regex_search(log, match, pattern) ? match[1].str() : "";
}

// True when `text` names `rank`: "rank 3" or a list "ranks [1, 3]".
bool namesRank(const std::string& text, int rank) {
  const std::string r = std::to_string(rank);
  return std::regex_search(text, std::regex("rank " + r + "(?![0-9])")) ||
         std::regex_search(text, std::regex("ranks \\[([0-9]+, )*" + r + "(, [0-9]+)*\\]"));
}

// True when `text` names daemon `d` of the job: its peer address, "leader"
// for daemon 0, or one of the ranks it holds.
bool namesDaemon(const std::string& text, int d, const std::string& address, const std::vector<int>& placement) {
  if (text.find(address) != std::string::npos || (d == 0 && text.find("leader") != std::string::npos)) return true;
  for (int r = 0; r < static_cast<int>(placement.size()); ++r) {
    if (placement[r] == d && namesRank(text, r)) return true;
  }
  return false;
}

class FaultCampaignTest : public ::testing::Test {
 protected:
  void ensureDaemons(size_t count) {
    daemons_.resize(std::max(count, daemons_.size()));
    for (auto& d : daemons_) {
      if (d) continue;
      d = std::make_unique<DaemonFixture>();
      std::string error;
      ASSERT_TRUE(d->start(kDaemonFlags, &error)) << error;
    }
  }
  std::vector<const DaemonFixture*> use(size_t count) const {
    std::vector<const DaemonFixture*> out;
    for (size_t i = 0; i < count; ++i) out.push_back(daemons_[i].get());
    return out;
  }
  // gradsyncctl status on daemon `d` answers within 5 s.
  bool answers(size_t d) {
    Process ctl = Process::spawn({runfile("tools/gradsyncctl/gradsyncctl"), "--socket", daemons_[d]->socketPath(), "status"},
                                 {}, daemons_[d]->dir() + "/status.log");
    return ctl.wait(std::chrono::seconds(5)) == 0;
  }
  std::string logs() const {
    std::string all;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i]) all += "--- daemon " + std::to_string(i) + ":\n" + daemons_[i]->log();
    }
    return all;
  }

  std::vector<std::unique_ptr<DaemonFixture>> daemons_;
};

TEST_F(FaultCampaignTest, EveryFaultEndsEverySurvivorWithANamedErrorInBoundedTime) {
  const int rounds = envInt("GRADSYNC_CAMPAIGN_ROUNDS", 6);
  const int seed = envInt("GRADSYNC_CAMPAIGN_SEED", 20261122);
  std::mt19937 random(static_cast<uint32_t>(seed));
  int hangs = 0, unnamed = 0, daemon_casualties = 0;
  double worst = 0;
  for (int round = 0; round < rounds && !HasFatalFailure(); ++round) {
    const size_t daemon_count = 2 + round % 2;
    const std::vector<int> placement = daemon_count == 2 ? std::vector<int>{0, 0, 1, 1} : std::vector<int>{0, 1, 1, 2};
    // The first rounds cover every kind once; later ones draw at random.
    const Fault fault = static_cast<Fault>(round < kFaultKinds ? round : random() % kFaultKinds);
    const int victim_rank = static_cast<int>(random() % placement.size());
    const int victim_daemon = fault == Fault::kLeaderDaemonKill || fault == Fault::kLeaderDaemonStop
                                  ? 0
                                  : 1 + static_cast<int>(random() % (daemon_count - 1));
    const auto delay = std::chrono::milliseconds(random() % 1500);
    const bool rank_fault = fault == Fault::kRankKill || fault == Fault::kRankStop;
    const bool stop = fault == Fault::kRankStop || fault == Fault::kFollowerDaemonStop || fault == Fault::kLeaderDaemonStop;
    const std::string what = "round " + std::to_string(round) + ": " + faultName(fault) + " " +
                             std::to_string(rank_fault ? victim_rank : victim_daemon) + " after " +
                             std::to_string(delay.count()) + " ms (" + std::to_string(daemon_count) + " daemons)";
    ensureDaemons(daemon_count);
    if (HasFatalFailure()) break;
    const std::string victim_address = daemons_[victim_daemon]->peerAddress();
    const std::string job = "campaign-" + std::to_string(round);
    auto ranks = launchAcross(use(daemon_count), job, {"campaign_loop"}, placement);
    ASSERT_TRUE(waitFor([&] {
      for (const auto& r : ranks) {
        if (r.log().find("RUNNING") == std::string::npos) return false;
      }
      return true;
    }, std::chrono::seconds(30))) << what << ": the job did not start\n" << logs();
    std::this_thread::sleep_for(delay);

    const auto injected = SteadyClock::now();
    if (rank_fault) {
      ranks[victim_rank].kill(stop ? SIGSTOP : SIGKILL);
    } else {
      daemons_[victim_daemon]->process().kill(stop ? SIGSTOP : SIGKILL);
    }
    const auto targeted = [&](int r) { return rank_fault ? r == victim_rank : placement[r] == victim_daemon; };
    double slowest = 0;
    for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
      if (targeted(r)) continue;
      const auto left = kBound - (SteadyClock::now() - injected);
      const int code = ranks[r].wait(std::chrono::duration_cast<std::chrono::milliseconds>(left));
      const double seconds = Seconds(SteadyClock::now() - injected).count();
      slowest = std::max(slowest, seconds);
      const std::string message = errorLine(ranks[r]);
      if (code == -1) ++hangs;
      EXPECT_EQ(code, 3) << what << ": rank " << r << " did not end with an error within " << kBound.count() << " s\n"
                         << ranks[r].log() << logs();
      const bool named = rank_fault ? namesRank(message, victim_rank) : namesDaemon(message, victim_daemon, victim_address, placement);
      if (code == 3 && !named) ++unnamed;
      EXPECT_TRUE(named) << what << ": rank " << r << "'s error does not name the cause: " << message;
    }
    worst = std::max(worst, slowest);
    std::printf("%s: survivors ended within %.1f s\n", what.c_str(), slowest);

    // The targeted side: a stopped process is killed now (an operator's
    // answer to a hung process); ranks of a dead daemon end at once.
    if (stop) {
      if (rank_fault) {
        ranks[victim_rank].kill(SIGKILL);
      } else {
        daemons_[victim_daemon]->process().kill(SIGKILL);
      }
    }
    for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
      if (!targeted(r) || rank_fault) continue;
      EXPECT_EQ(ranks[r].wait(std::chrono::seconds(10)), 3) << what << ": rank " << r << " of the lost daemon\n"
                                                            << ranks[r].log();
      EXPECT_NE(errorLine(ranks[r]).find("gradsyncd"), std::string::npos) << what << ": " << ranks[r].log();
    }
    if (!rank_fault) {
      EXPECT_EQ(daemons_[victim_daemon]->process().wait(std::chrono::seconds(5)), 128 + SIGKILL) << what;
      daemons_[victim_daemon].reset();
    }

    // Every daemon not targeted is alive and answers; a new job runs on all.
    for (size_t d = 0; d < daemon_count; ++d) {
      if (!daemons_[d]) continue;
      const bool ok = answers(d);
      if (!ok) ++daemon_casualties;
      EXPECT_TRUE(ok) << what << ": daemon " << d << " does not answer gradsyncctl status\n" << daemons_[d]->log();
    }
    ensureDaemons(daemon_count);
    if (HasFatalFailure()) break;
    auto next = launchAcross(use(daemon_count), "after-" + std::to_string(round), {"allreduce"}, placement);
    std::string report;
    EXPECT_TRUE(allSucceed(next, std::chrono::seconds(60), &report)) << what << ": the next job failed\n"
                                                                    << report << logs();
  }
  std::printf("campaign seed %d: %d rounds, %d hangs, %d unnamed errors, %d untargeted daemons lost, "
              "slowest survivor %.1f s\n",
              seed, rounds, hangs, unnamed, daemon_casualties, worst);
}

}  // namespace
}  // namespace gradsync::testutil
