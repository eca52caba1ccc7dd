// SPDX-License-Identifier: Apache-2.0
#include "daemon/membership/ballot.h"

namespace gradsync::membership {

StatusOr<bool> Ballot::receive(const std::string& voter, uint64_t epoch, size_t majority) {
  if (epoch != round_) {  // a new election: the last one's votes do not count
    round_ = epoch;
    voted_for_.clear();
    votes_.clear();
  }
  if (!voted_for_.empty() && voted_for_ != self_) return failedPrecondition(self_ + " voted for " + voted_for_);
  voted_for_ = self_;
  votes_.insert(self_);
  votes_.insert(voter);
  return votes_.size() >= majority && !takingOverFrom(epoch);
}

void Ballot::takingOver(uint64_t epoch) {
  leading_from_ = epoch;
  took_over_.reset();
}

const v1::NewEpoch* Ballot::decided(uint64_t epoch) const {
  return takingOverFrom(epoch) && took_over_ ? &*took_over_ : nullptr;
}

}  // namespace gradsync::membership
