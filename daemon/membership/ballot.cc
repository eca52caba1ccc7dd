// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/ballot.h"

namespace gradsync::membership {

void Ballot::enter(uint64_t epoch) {
  if (epoch == round_) return;
  round_ = epoch;  // a new election: the last one's votes do not count
  voted_for_.clear();
  votes_.clear();
}

StatusOr<bool> Ballot::receive(const std::string& voter, uint64_t epoch, size_t majority) {
  enter(epoch);
  if (!voted_for_.empty() && voted_for_ != self_) return failedPrecondition(self_ + " voted for " + voted_for_);
  voted_for_ = self_;
  votes_.insert(self_);
  votes_.insert(voter);
  return votes_.size() >= majority && !takingOverFrom(epoch);
}

void Ballot::withdraw(const std::string& voter, uint64_t epoch) {
  if (epoch == round_ && voter != self_ && !takingOverFrom(epoch)) votes_.erase(voter);
}

Status Ballot::cast(const std::string& candidate, uint64_t epoch) {
  enter(epoch);
  if (voted_for_ == self_ && votes_.size() > 1) {
    return failedPrecondition(self_ + " stands itself, with " + std::to_string(votes_.size() - 1) + " votes");
  }
  if (!voted_for_.empty() && voted_for_ != self_ && voted_for_ != candidate) {
    return failedPrecondition(self_ + " voted for " + voted_for_);
  }
  voted_for_ = candidate;
  votes_.clear();
  return okStatus();
}

void Ballot::uncast(uint64_t epoch) {
  if (epoch == round_ && voted_for_ != self_) voted_for_.clear();
}

void Ballot::takingOver(uint64_t epoch) {
  leading_from_ = epoch;
  took_over_.reset();
}

const v1::NewEpoch* Ballot::decided(uint64_t epoch) const {
  return takingOverFrom(epoch) && took_over_ ? &*took_over_ : nullptr;
}

}  // namespace gradsync::membership
