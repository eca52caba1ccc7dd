// SPDX-License-Identifier: Apache-2.0
#include "client/src/cuda/staging_pool.h"

#include <algorithm>

namespace gradsync::client {

StatusOr<uint64_t> StagingPool::take(CudaDriver& driver, void* context, uint64_t bytes, void* stream) {
  Buffer* best = nullptr;  // the smallest free one large enough
  for (auto& buffer : buffers_) {
    if (!buffer.lent && buffer.bytes >= bytes && (best == nullptr || buffer.bytes < best->bytes)) best = &buffer;
  }
  if (best == nullptr) {
    const uint64_t size = std::max<uint64_t>(1, (bytes + kGranule - 1) / kGranule) * kGranule;
    ASSIGN_OR_RETURN(const uint64_t address, driver.allocate(context, size));
    buffers_.push_back(Buffer{address, size, false, nullptr});
    best = &buffers_.back();
  }
  if (best->released != nullptr) RETURN_IF_ERROR(driver.streamWaitEvent(context, stream, best->released));
  best->lent = true;
  return best->address;
}

Status StagingPool::give(CudaDriver& driver, void* context, uint64_t address, void* stream) {
  for (auto& buffer : buffers_) {
    if (buffer.address != address) continue;
    buffer.lent = false;
    if (buffer.released == nullptr) {
      ASSIGN_OR_RETURN(buffer.released, driver.createEvent(context));
    }
    return driver.recordEvent(context, buffer.released, stream);
  }
  return internalError("staging buffer " + std::to_string(address) + " is not this session's");
}

std::vector<uint64_t> StagingPool::idle() const {
  std::vector<uint64_t> out;
  for (const auto& buffer : buffers_) {
    if (!buffer.lent) out.push_back(buffer.address);
  }
  return out;
}

void StagingPool::free(CudaDriver& driver, void* context, uint64_t address) {
  auto it =
      std::find_if(buffers_.begin(), buffers_.end(), [&](const Buffer& b) { return b.address == address && !b.lent; });
  if (it == buffers_.end()) return;
  if (it->released != nullptr) driver.destroyEvent(context, it->released);
  driver.freeMemory(context, it->address);
  buffers_.erase(it);
}

void StagingPool::freeAll(CudaDriver& driver, void* context) {
  for (auto& buffer : buffers_) {
    if (buffer.released != nullptr) driver.destroyEvent(context, buffer.released);
    driver.freeMemory(context, buffer.address);
  }
  buffers_.clear();
}

}  // namespace gradsync::client
