// SPDX-License-Identifier: Apache-2.0
// The fault campaign: round after round, a 4-rank job loops over collectives
// on 2, 3 or 4 daemons (with 4, its 64 KiB allreduce goes by halving and
// doubling) and one fault is injected at a random moment: SIGKILL
// or SIGSTOP of a rank, of a follower's daemon or of the leader's daemon,
// or, with the daemons on the hosts of a NetworkLab (network namespaces on
// a bridge), a cut link, 5% packet loss or a 20 Mbit/s link at one daemon.
// Every round checks that every rank not targeted ends within kBound with
// an error naming the cause (a cut link: a daemon across the cut), or, for
// loss and a slow link, that the job goes on and ends cleanly when asked;
// that no daemon that was not targeted died or stopped answering; and that
// a new job runs on all daemons afterwards.
//
// Seeded: GRADSYNC_CAMPAIGN_SEED (default 20261122) and
// GRADSYNC_CAMPAIGN_ROUNDS (default 6) replay a campaign exactly (timing
// aside); scripts/fault_campaign.sh runs 100 rounds.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testutil/daemon_fixture.h"
#include "tests/testutil/network_lab.h"

namespace gradsync::testutil {
namespace {

using Seconds = std::chrono::duration<double>;
using SteadyClock = std::chrono::steady_clock;

// Stall deadline 5 s (a stopped rank), heartbeat silence 6 s (a stopped
// daemon), each checked every 100 ms; a killed rank or daemon is noticed at
// once. The bound leaves room for a loaded machine.
// A cut link is noticed by heartbeat silence too.
constexpr auto kBound = std::chrono::seconds(15);
// How long loss or a slow link lasts before the job is asked to end.
constexpr auto kImpairment = std::chrono::seconds(4);
const std::vector<std::string> kDaemonFlags = {"--join-timeout-seconds",   "10", "--stall-warning-seconds", "1",
                                               "--stall-deadline-seconds", "5"};

enum class Fault {
  kRankKill,
  kRankStop,
  kFollowerDaemonKill,
  kFollowerDaemonStop,
  kLeaderDaemonKill,
  kLeaderDaemonStop,
  kLinkCut,
  kPacketLoss,
  kSlowLink,
};
constexpr int kProcessFaultKinds = 6;
constexpr int kFaultKinds = 9;

const char* faultName(Fault f) {
  switch (f) {
    case Fault::kRankKill:
      return "SIGKILL rank";
    case Fault::kRankStop:
      return "SIGSTOP rank";
    case Fault::kFollowerDaemonKill:
      return "SIGKILL follower daemon";
    case Fault::kFollowerDaemonStop:
      return "SIGSTOP follower daemon";
    case Fault::kLeaderDaemonKill:
      return "SIGKILL leader daemon";
    case Fault::kLeaderDaemonStop:
      return "SIGSTOP leader daemon";
    case Fault::kLinkCut:
      return "cut the link of daemon";
    case Fault::kPacketLoss:
      return "5% packet loss at daemon";
    case Fault::kSlowLink:
      return "20 Mbit/s link at daemon";
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
      const int host = static_cast<int>(&d - daemons_.data());
      d = std::make_unique<DaemonFixture>();
      std::string error;
      std::vector<std::string> flags = kDaemonFlags;
      if (lab_.available()) {
        // UCX over TCP only: shared memory would bypass the lab's network.
        flags.insert(flags.end(),
                     {"--peer-address", lab_.address(host) + ":0", "--data-plane-devices", lab_.device(host)});
        ASSERT_TRUE(d->startWrapped(lab_.wrapper(host), {{"UCX_TLS", "tcp"}}, flags, &error)) << error;
      } else {
        flags.insert(flags.end(), {"--peer-address", "127.0.0.1:0"});
        ASSERT_TRUE(d->start(flags, &error)) << error;
      }
    }
  }
  std::vector<const DaemonFixture*> use(size_t count) const {
    std::vector<const DaemonFixture*> out;
    for (size_t i = 0; i < count; ++i) out.push_back(daemons_[i].get());
    return out;
  }
  // gradsyncctl status on daemon `d` answers within 5 s.
  bool answers(size_t d) {
    Process ctl =
        Process::spawn({runfile("tools/gradsyncctl/gradsyncctl"), "--socket", daemons_[d]->socketPath(), "status"}, {},
                       daemons_[d]->dir() + "/status.log");
    return ctl.wait(std::chrono::seconds(5)) == 0;
  }
  std::string logs() const {
    std::string all;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i]) all += "--- daemon " + std::to_string(i) + ":\n" + daemons_[i]->log();
    }
    return all;
  }

  void TearDown() override { daemons_.clear(); }  // stop the daemons before their namespaces go

  NetworkLab lab_{4};
  std::vector<std::unique_ptr<DaemonFixture>> daemons_;
};

// The last "STEP n" a campaign_loop rank printed (-1 if none).
int lastStep(const Process& rank) {
  const std::string log = rank.log();
  const size_t at = log.rfind("STEP ");
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + 5);
}

// One round: the job, the fault and what has been counted.
struct Round {
  std::string what;
  Fault fault;
  int victim_rank = -1;    // for rank faults
  int victim_daemon = -1;  // otherwise
  std::vector<int> placement;
  std::string victim_address;
};

struct Tally {
  int hangs = 0, unnamed = 0, daemon_casualties = 0;
  double worst = 0;
};

bool isRankFault(Fault f) { return f == Fault::kRankKill || f == Fault::kRankStop; }
bool isStop(Fault f) {
  return f == Fault::kRankStop || f == Fault::kFollowerDaemonStop || f == Fault::kLeaderDaemonStop;
}
bool isNetworkFault(Fault f) { return static_cast<int>(f) >= kProcessFaultKinds; }
bool isImpairment(Fault f) { return f == Fault::kPacketLoss || f == Fault::kSlowLink; }

// Waits for the ranks `expected` says to wait for, each to exit 3 within
// kBound of `injected` with an error that `named` accepts.
template <typename Expected, typename Named>
void expectNamedFailures(std::vector<Process>& ranks, const Round& round, SteadyClock::time_point injected,
                         Expected expected, Named named, Tally* tally, const std::string& logs) {
  double slowest = 0;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    if (!expected(r)) continue;
    const auto left = kBound - (SteadyClock::now() - injected);
    const int code = ranks[r].wait(std::chrono::duration_cast<std::chrono::milliseconds>(left));
    slowest = std::max(slowest, Seconds(SteadyClock::now() - injected).count());
    const std::string message = errorLine(ranks[r]);
    if (code == -1) ++tally->hangs;
    EXPECT_EQ(code, 3) << round.what << ": rank " << r << " did not end with an error within " << kBound.count()
                       << " s\n"
                       << ranks[r].log() << logs;
    if (code == 3 && !named(r, message)) ++tally->unnamed;
    EXPECT_TRUE(named(r, message)) << round.what << ": rank " << r << "'s error does not name the cause: " << message;
  }
  tally->worst = std::max(tally->worst, slowest);
  std::printf("%s: survivors ended within %.1f s\n", round.what.c_str(), slowest);
}

TEST_F(FaultCampaignTest, EveryFaultEndsEverySurvivorWithANamedErrorInBoundedTime) {
  const int rounds = envInt("GRADSYNC_CAMPAIGN_ROUNDS", 9);
  const int seed = envInt("GRADSYNC_CAMPAIGN_SEED", 20261122);
  // The network faults need the lab: without it the campaign fails rather
  // than run the process faults alone.
  ASSERT_TRUE(lab_.available()) << lab_.unavailableReason();
  const int kinds = kFaultKinds;
  std::mt19937 random(static_cast<uint32_t>(seed));
  Tally tally;
  for (int n = 0; n < rounds && !HasFatalFailure(); ++n) {
    const size_t daemon_count = 2 + n % 3;
    Round round;
    round.placement = daemon_count == 2   ? std::vector<int>{0, 0, 1, 1}
                      : daemon_count == 3 ? std::vector<int>{0, 1, 1, 2}
                                          : std::vector<int>{0, 1, 2, 3};
    // The first rounds cover every kind once; later ones draw at random.
    round.fault = static_cast<Fault>(n < kinds ? n : random() % kinds);
    const Fault fault = round.fault;
    round.victim_rank = static_cast<int>(random() % round.placement.size());
    const int follower = 1 + static_cast<int>(random() % (daemon_count - 1));
    const int any_daemon = static_cast<int>(random() % daemon_count);
    round.victim_daemon = fault == Fault::kLeaderDaemonKill || fault == Fault::kLeaderDaemonStop ? 0
                          : isNetworkFault(fault)                                                ? any_daemon
                                                                                                 : follower;
    const auto delay = std::chrono::milliseconds(random() % 1500);
    const bool rank_fault = isRankFault(fault);
    round.what = "round " + std::to_string(n) + ": " + faultName(fault) + " " +
                 std::to_string(rank_fault ? round.victim_rank : round.victim_daemon) + " after " +
                 std::to_string(delay.count()) + " ms (" + std::to_string(daemon_count) + " daemons)";
    const std::string& what = round.what;
    ensureDaemons(daemon_count);
    if (HasFatalFailure()) break;
    round.victim_address = daemons_[round.victim_daemon]->peerAddress();
    const std::string job = "campaign-" + std::to_string(n);
    const std::string stop_file = daemons_[0]->dir() + "/" + job + ".stop";
    auto ranks = launchAcross(use(daemon_count), job, {"campaign_loop", stop_file, "medium"}, round.placement);
    ASSERT_TRUE(waitFor(
        [&] {
          for (const auto& r : ranks) {
            if (r.log().find("RUNNING") == std::string::npos) return false;
          }
          return true;
        },
        std::chrono::seconds(30)))
        << what << ": the job did not start\n"
        << logs();
    std::this_thread::sleep_for(delay);

    const auto injected = SteadyClock::now();
    const int victim = round.victim_daemon;
    if (rank_fault) {
      ranks[round.victim_rank].kill(isStop(fault) ? SIGSTOP : SIGKILL);
    } else if (fault == Fault::kLinkCut) {
      ASSERT_TRUE(lab_.cut(victim)) << what;
    } else if (fault == Fault::kPacketLoss) {
      ASSERT_TRUE(lab_.dropPercent(victim, 5)) << what;
    } else if (fault == Fault::kSlowLink) {
      ASSERT_TRUE(lab_.throttle(victim, "20mbit")) << what;
    } else {
      daemons_[victim]->process().kill(isStop(fault) ? SIGSTOP : SIGKILL);
    }
    const auto on_victim = [&](int r) { return round.placement[r] == victim; };
    const auto names = [&](int d, const std::string& message) {
      return namesDaemon(message, d, daemons_[d]->peerAddress(), round.placement);
    };

    if (isImpairment(fault)) {
      // The job goes on: every rank still runs and steps after kImpairment;
      // once the link is healthy again, the ranks end together when asked.
      std::vector<int> before;
      for (const auto& r : ranks) before.push_back(lastStep(r));
      std::this_thread::sleep_for(kImpairment);
      for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
        EXPECT_TRUE(ranks[r].running()) << what << ": rank " << r << " ended\n" << ranks[r].log() << logs();
        EXPECT_GT(lastStep(ranks[r]), before[r]) << what << ": rank " << r << " made no progress";
      }
      lab_.clearImpairments(victim);
      std::FILE* marker = std::fopen(stop_file.c_str(), "w");
      ASSERT_NE(marker, nullptr);
      std::fclose(marker);
      std::string report;
      const bool ended = allSucceed(ranks, kBound, &report);
      if (!ended) ++tally.hangs;
      EXPECT_TRUE(ended) << what << ": the job did not end cleanly once asked\n" << report << logs();
      std::printf("%s: the job went on (%d steps more in %.0f s) and ended cleanly\n", what.c_str(),
                  lastStep(ranks[0]) - before[0], Seconds(kImpairment).count());
    } else if (fault == Fault::kLinkCut) {
      // Both sides of the cut end, each naming a daemon across it.
      expectNamedFailures(
          ranks, round, injected, [](int) { return true; },
          [&](int r, const std::string& message) {
            if (!on_victim(r)) return names(victim, message);
            for (size_t d = 0; d < daemon_count; ++d) {
              if (static_cast<int>(d) != victim && names(static_cast<int>(d), message)) return true;
            }
            return false;
          },
          &tally, logs());
      ASSERT_TRUE(lab_.restore(victim)) << what;
    } else {
      const auto targeted = [&](int r) { return rank_fault ? r == round.victim_rank : on_victim(r); };
      expectNamedFailures(
          ranks, round, injected, [&](int r) { return !targeted(r); },
          [&](int, const std::string& message) {
            return rank_fault ? namesRank(message, round.victim_rank)
                              : namesDaemon(message, victim, round.victim_address, round.placement);
          },
          &tally, logs());
      // The targeted side: a stopped process is killed now (an operator's
      // answer to a hung process); ranks of a dead daemon end at once.
      if (isStop(fault)) {
        if (rank_fault) {
          ranks[round.victim_rank].kill(SIGKILL);
        } else {
          daemons_[victim]->process().kill(SIGKILL);
        }
      }
      for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
        if (!targeted(r) || rank_fault) continue;
        EXPECT_EQ(ranks[r].wait(std::chrono::seconds(10)), 3) << what << ": rank " << r << " of the lost daemon\n"
                                                              << ranks[r].log();
        EXPECT_NE(errorLine(ranks[r]).find("gradsyncd"), std::string::npos) << what << ": " << ranks[r].log();
      }
      if (!rank_fault) {
        EXPECT_EQ(daemons_[victim]->process().wait(std::chrono::seconds(5)), 128 + SIGKILL) << what;
        daemons_[victim].reset();
      }
    }

    // Every daemon not targeted is alive and answers; a new job runs on all.
    for (size_t d = 0; d < daemon_count; ++d) {
      if (!daemons_[d]) continue;
      const bool ok = answers(d);
      if (!ok) ++tally.daemon_casualties;
      EXPECT_TRUE(ok) << what << ": daemon " << d << " does not answer gradsyncctl status\n" << daemons_[d]->log();
    }
    ensureDaemons(daemon_count);
    if (HasFatalFailure()) break;
    auto next = launchAcross(use(daemon_count), "after-" + std::to_string(n), {"allreduce"}, round.placement);
    std::string report;
    EXPECT_TRUE(allSucceed(next, std::chrono::seconds(60), &report)) << what << ": the next job failed\n"
                                                                     << report << logs();
  }
  std::printf(
      "campaign seed %d: %d rounds, %d hangs, %d unnamed errors, %d untargeted daemons lost, "
      "slowest survivor %.1f s\n",
      seed, rounds, tally.hangs, tally.unnamed, tally.daemon_casualties, tally.worst);
}

}  // namespace
}  // namespace gradsync::testutil
