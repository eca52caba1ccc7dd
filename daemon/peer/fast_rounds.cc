// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/fast_rounds.h"

#include <string>

namespace gradsync::peer {
namespace {
// Phase 3 of the data plane's tag space (the ring uses 0 and 1, the
// pairwise exchange 2).
constexpr int kRoundPhase = 3;
}  // namespace

FastRounds::FastRounds(collective::MeshContext mesh) : mesh_(std::move(mesh)), theirs_(mesh_.size()) {}

uint64_t FastRounds::tag(int from) const { return collective::ringTag(mesh_.tag_key, round_, kRoundPhase, from, 0); }

void FastRounds::postReceives() {
  if (!receives_.empty()) return;
  receives_.resize(mesh_.size());
  for (int from = 0; from < mesh_.size(); ++from) {
    if (from == mesh_.rank) continue;
    receives_[from] = mesh_.peers[from]->irecv(&theirs_[from], sizeof(Message), tag(from));
  }
}

StatusOr<bool> FastRounds::waitForPeers(int wake_fd, transport::Clock::time_point until) {
  postReceives();
  std::vector<transport::Request*> raw;
  for (auto& r : receives_) {
    if (r) raw.push_back(r.get());
  }
  RETURN_IF_ERROR(mesh_.transport->waitAny(raw.data(), raw.size(), wake_fd, until));
  for (auto* r : raw) {
    if (r->test()) return true;
  }
  return false;
}

StatusOr<FastRounds::Outcome> FastRounds::exchange(const std::vector<uint64_t>& ready, LeaderPart leader,
                                                   transport::Clock::time_point deadline) {
  postReceives();
  mine_ = Message();
  mine_.round = round_;
  mine_.leader_sequence = leader.sequence;
  mine_.fusion_threshold_bytes = leader.fusion_threshold_bytes;
  for (uint64_t id : ready) {
    if (id >= 1 && id <= kMaxIds) mine_.bits[(id - 1) / 64] |= uint64_t{1} << ((id - 1) % 64);
  }
  std::vector<transport::RequestPtr> sends;
  std::vector<transport::Request*> raw;
  for (int to = 0; to < mesh_.size(); ++to) {
    if (to == mesh_.rank) continue;
    // Every receiver tells the senders apart by their tags.
    sends.push_back(mesh_.peers[to]->isend(&mine_, sizeof(Message), tag(mesh_.rank)));
    raw.push_back(sends.back().get());
    raw.push_back(receives_[to].get());
  }
  RETURN_IF_ERROR(mesh_.transport->waitAll(raw.data(), raw.size(), deadline,
                                           "round " + std::to_string(round_) + " of the cached steady state"));
  Outcome outcome;
  Message agreed = mine_;
  for (int from = 0; from < mesh_.size(); ++from) {
    if (from == mesh_.rank) continue;
    const Message& m = theirs_[from];
    if (m.round != round_) {
      return dataLoss("the daemon at ring position " + std::to_string(from) + " sent round " + std::to_string(m.round) +
                      " of the cached steady state where round " + std::to_string(round_) + " was due");
    }
    for (size_t w = 0; w < kMaxIds / 64; ++w) agreed.bits[w] &= m.bits[w];
  }
  const Message& leaders = mesh_.rank == 0 ? mine_ : theirs_[0];
  outcome.leader_sequence = leaders.leader_sequence;
  outcome.fusion_threshold_bytes = leaders.fusion_threshold_bytes;
  for (size_t w = 0; w < kMaxIds / 64; ++w) {
    for (uint64_t bits = agreed.bits[w]; bits != 0; bits &= bits - 1) {
      outcome.ids.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits)) + 1);
    }
  }
  receives_.clear();
  ++round_;
  return outcome;
}

}  // namespace gradsync::peer
