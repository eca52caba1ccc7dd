// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/budget.h"

namespace gradsync {

Budget::Lease& Budget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = other.budget_;
    units_ = other.units_;
    other.budget_ = nullptr;
  }
  return *this;
}

void Budget::Lease::release() {
  if (budget_ != nullptr) budget_->used_.fetch_sub(units_);
  budget_ = nullptr;
}

StatusOr<Budget::Lease> Budget::acquire(uint64_t units, const std::string& who) {
  uint64_t used = used_.load();
  do {
    if (units > limit_ || used > limit_ - units) {
      return resourceExhausted(who + ": needs " + std::to_string(units) + " " + what_ + ", but " +
                               std::to_string(used) + " of the daemon's limit of " + std::to_string(limit_) +
                               " are in use");
    }
  } while (!used_.compare_exchange_weak(used, used + units));
  return Lease(this, units);
}

}  // namespace gradsync
