// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/fast_rounds.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace gradsync::peer {
namespace {
// Phase 3 of the data plane's tag space (the ring uses 0 and 1, the
// pairwise exchange 2).
constexpr int kRoundPhase = 3;
}  // namespace

FastRounds::FastRounds(collective::MeshContext mesh) : mesh_(std::move(mesh)) {}

FastRounds::~FastRounds() = default;

collective::RecursiveDoubling& FastRounds::current() {
  if (!run_) {
    mesh_.id = collective::TransferId::control(round_);
    run_ = std::make_unique<collective::RecursiveDoubling>(mesh_, kRoundPhase, sizeof(Message));
    run_->postReceives();
  }
  return *run_;
}

StatusOr<bool> FastRounds::waitForPeers(int wake_fd, transport::Clock::time_point until) {
  std::vector<transport::Request*> raw = current().postReceives();
  if (raw.empty()) return false;  // no other daemon
  RETURN_IF_ERROR(mesh_.transport->waitAny(raw.data(), raw.size(), wake_fd, until));
  for (auto* r : raw) {
    if (r->test()) return true;
  }
  return false;
}

StatusOr<FastRounds::Outcome> FastRounds::exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                                                   transport::Clock::time_point deadline) {
  collective::RecursiveDoubling& run = current();
  Message mine;
  mine.round = round_;
  if (mesh_.rank == 0) {
    mine.has_leader = 1;
    mine.leader_sequence = leader.sequence;
    mine.fusion_threshold_bytes = leader.fusion_threshold_bytes;
  }
  const std::vector<uint64_t> ready_bits = idsToBits(ready);
  std::copy(ready_bits.begin(), ready_bits.end(), mine.bits);
  uint64_t wrong_round = 0;
  const collective::DoublingCombine combine = [&](const uint8_t* in, uint8_t* out, bool) {
    Message theirs;
    std::memcpy(&theirs, in, sizeof theirs);
    Message* agreed = reinterpret_cast<Message*>(out);
    if (theirs.round != round_) wrong_round = theirs.round;
    for (size_t w = 0; w < kMaxIds / 64; ++w) agreed->bits[w] &= theirs.bits[w];
    if (theirs.has_leader) {
      agreed->has_leader = 1;
      agreed->leader_sequence = theirs.leader_sequence;
      agreed->fusion_threshold_bytes = theirs.fusion_threshold_bytes;
    }
  };
  mesh_.deadline = deadline;
  if (std::string why = abortedWhy(); !why.empty()) return aborted(why);
  const Status done =
      run.run(reinterpret_cast<uint8_t*>(&mine), combine,
              "round " + std::to_string(round_) + " of the cached steady state", [this] { return abortedWhy(); });
  messages_sent_ += run.messagesSent();
  run_.reset();
  RETURN_IF_ERROR(done);
  if (wrong_round != 0 || mine.round != round_ || !mine.has_leader) {
    return dataLoss("a daemon sent round " + std::to_string(wrong_round ? wrong_round : mine.round) +
                    " of the cached steady state where round " + std::to_string(round_) + " was due");
  }
  Outcome outcome;
  outcome.leader_sequence = mine.leader_sequence;
  outcome.fusion_threshold_bytes = mine.fusion_threshold_bytes;
  outcome.ids = bitsToIds(mine.bits, kMaxIds / 64);
  ++round_;
  return outcome;
}

void FastRounds::abort(const std::string& reason) {
  MutexLock lock(abort_mutex_);
  if (aborted_.empty()) aborted_ = reason.empty() ? "the rounds were aborted" : reason;
}

std::string FastRounds::abortedWhy() const {
  MutexLock lock(abort_mutex_);
  return aborted_;
}

}  // namespace gradsync::peer
