// SPDX-License-Identifier: Apache-2.0
// The daemon's side of a rank's submission ring, fed by a hostile client:
// the shared indices and slots come from the input, and every record popped
// goes where RingReader sends it (Enqueue parse, then validateEnqueue
// against the rank's arena). Layout: tail (4 bytes), head seen by the
// producer (4), then per slot a 2-byte length and that many payload bytes.
#include <cstring>
#include <memory>

#include "daemon/server/enqueue_validation.h"
#include "handoff/ring.h"
#include "tests/fuzz/fuzz_arena.h"

namespace gradsync::fuzz {
namespace {

struct SharedRing {
  handoff::RingIndices indices{};
  handoff::RingSlot slots[handoff::kRingSlots];
};

uint32_t take32(const uint8_t*& data, size_t& size) {
  uint32_t v = 0;
  const size_t n = size < 4 ? size : 4;
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

}  // namespace
}  // namespace gradsync::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  auto ring = std::make_unique<fuzz::SharedRing>();
  ring->indices.tail = fuzz::take32(data, size);
  ring->indices.head = fuzz::take32(data, size);
  for (uint32_t i = 0; i < handoff::kRingSlots && size >= 2; ++i) {
    uint16_t length = 0;
    std::memcpy(&length, data, 2);
    data += 2;
    size -= 2;
    ring->slots[i].length = length;  // may exceed the slot: the consumer must notice
    const size_t n = std::min<size_t>({length, size, sizeof(ring->slots[i].bytes)});
    std::memcpy(ring->slots[i].bytes, data, n);
    data += n;
    size -= n;
  }
  handoff::RingConsumer consumer(&ring->indices, ring->slots);
  server::EnqueueContext context;
  context.rank = 1;
  context.job_size = 4;
  context.process_sets = std::make_shared<coordinator::ProcessSetTable>(4, std::vector<std::vector<int>>{{1, 2}});
  context.arena = &fuzz::fuzzArena();
  std::string bytes;
  for (uint32_t i = 0; i <= handoff::kRingSlots; ++i) {
    bool got = false;
    if (!consumer.pop(&bytes, &got).isOk() || !got) break;
    v1::Enqueue enqueue;
    if (!enqueue.ParseFromString(bytes)) break;
    (void)server::validateEnqueue(enqueue, context);
  }
  return 0;
}
