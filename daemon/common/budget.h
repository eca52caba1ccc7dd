// SPDX-License-Identifier: Apache-2.0
// A daemon-wide limit on a shared resource (arena bytes, CUDA IPC mappings):
// acquire() takes units if they fit under the limit and returns a Lease that
// gives them back when it is destroyed, so every exit path returns them.
// Thread-safe; the Budget must outlive its leases.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace gradsync {

class Budget {
 public:
  // `what`: the resource and its unit in messages ("arena bytes").
  Budget(std::string what, uint64_t limit) : what_(std::move(what)), limit_(limit) {}
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept : budget_(other.budget_), units_(other.units_) { other.budget_ = nullptr; }
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    uint64_t units() const { return budget_ ? units_ : 0; }

   private:
    friend class Budget;
    Lease(Budget* budget, uint64_t units) : budget_(budget), units_(units) {}
    void release();
    Budget* budget_ = nullptr;
    uint64_t units_ = 0;
  };

  // `units` more, or RESOURCE_EXHAUSTED naming `who`, the resource, what is
  // in use and the limit.
  StatusOr<Lease> acquire(uint64_t units, const std::string& who);
  uint64_t used() const { return used_.load(); }
  uint64_t limit() const { return limit_; }

 private:
  const std::string what_;
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace gradsync
