// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/ring_allreduce.h"

#include <algorithm>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::collective {
namespace {

using transport::RequestPtr;

struct Segment {
  size_t begin = 0;  // elements
  size_t count = 0;
};

Segment segmentOf(size_t count, int size, int index) {
  const size_t begin = count * static_cast<size_t>(index) / static_cast<size_t>(size);
  const size_t end = count * static_cast<size_t>(index + 1) / static_cast<size_t>(size);
  return {begin, end - begin};
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// One step: send segment `send` to the right, receive segment `recv` from the
// left; phase 0 reduces what arrives into `data`, phase 1 copies it there.
class Step {
 public:
  Step(const RingContext& ring, uint8_t* data, size_t count, DataType dtype, ReduceOp op, uint8_t* scratch)
      : ring_(ring), data_(data), count_(count), dtype_(dtype), op_(op), scratch_(scratch),
        esize_(elementSize(dtype)), chunk_elements_(std::max<size_t>(1, ring.chunk_bytes / esize_)) {}

  Status run(int phase, int step, int send_index, int recv_index) {
    const Segment send = segmentOf(count_, ring_.size, send_index);
    const Segment recv = segmentOf(count_, ring_.size, recv_index);
    const std::string what = "ring allreduce step " + std::to_string(phase == 0 ? step : ring_.size - 1 + step) +
                             " with the daemons of ranks " + std::to_string(ring_.left->rank()) + " (left) and " +
                             std::to_string(ring_.right->rank()) + " (right)";
    std::vector<RequestPtr> sends;
    for (size_t c = 0; c * chunk_elements_ < send.count; ++c) {
      const size_t n = std::min(chunk_elements_, send.count - c * chunk_elements_);
      sends.push_back(ring_.right->isend(data_ + (send.begin + c * chunk_elements_) * esize_, n * esize_,
                                         ringTag(ring_.tag_key, ring_.sequence, phase, step, c)));
    }
    const size_t chunks = (recv.count + chunk_elements_ - 1) / chunk_elements_;
    RequestPtr pending = chunks > 0 ? postRecv(phase, step, recv, 0) : nullptr;
    for (size_t c = 0; c < chunks; ++c) {
      RequestPtr next = c + 1 < chunks ? postRecv(phase, step, recv, c + 1) : nullptr;
      transport::Request* one[] = {pending.get()};
      RETURN_IF_ERROR(ring_.transport->waitAll(one, 1, ring_.deadline, what));
      if (phase == 0) reduceChunk(recv, c);
      pending = std::move(next);
    }
    std::vector<transport::Request*> raw;
    for (auto& s : sends) raw.push_back(s.get());
    return ring_.transport->waitAll(raw.data(), raw.size(), ring_.deadline, what);
  }

 private:
  // Phase 0 receives into the scratch half of this chunk's parity; phase 1
  // straight into place.
  RequestPtr postRecv(int phase, int step, const Segment& recv, size_t c) {
    const size_t n = std::min(chunk_elements_, recv.count - c * chunk_elements_);
    uint8_t* target = phase == 0 ? scratch_ + (c % 2) * chunk_elements_ * esize_
                                 : data_ + (recv.begin + c * chunk_elements_) * esize_;
    return ring_.left->irecv(target, n * esize_, ringTag(ring_.tag_key, ring_.sequence, phase, step, c));
  }

  void reduceChunk(const Segment& recv, size_t c) {
    const size_t n = std::min(chunk_elements_, recv.count - c * chunk_elements_);
    uint8_t* local = data_ + (recv.begin + c * chunk_elements_) * esize_;
    const void* inputs[] = {local, scratch_ + (c % 2) * chunk_elements_ * esize_};
    void* outputs[] = {local};
    reduce::ReduceArgs args;
    args.dtype = dtype_;
    args.op = op_;
    args.inputs = inputs;
    args.num_inputs = 2;
    args.outputs = outputs;
    args.num_outputs = 1;
    reduce::reduceRange(args, 0, n);
  }

  const RingContext& ring_;
  uint8_t* data_;
  size_t count_;
  DataType dtype_;
  ReduceOp op_;
  uint8_t* scratch_;
  size_t esize_;
  size_t chunk_elements_;
};

}  // namespace

uint64_t ringTag(const SipKey& key, uint64_t sequence, int phase, int step, size_t chunk) {
  const uint64_t plain = (sequence << 32) | (static_cast<uint64_t>(phase & 1) << 31) |
                         (static_cast<uint64_t>(step & 0x7fff) << 16) | (chunk & 0xffff);
  return sipHash24(key, &plain, sizeof(plain));
}

Status ringAllreduce(const RingContext& ring, void* data, size_t count, DataType dtype, ReduceOp op,
                     std::vector<uint8_t>* scratch) {
  if (ring.size <= 1 || count == 0) return okStatus();
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("ring allreduce: unknown dtype");
  RingContext ctx = ring;
  // Keep chunk numbers within the tag's 16 bits.
  const size_t largest_segment = (count + ring.size - 1) / ring.size;
  ctx.chunk_bytes = std::max(ctx.chunk_bytes, (largest_segment / 0xffff + 1) * esize);
  scratch->resize(2 * std::max<size_t>(1, ctx.chunk_bytes / esize) * esize);
  Step step(ctx, static_cast<uint8_t*>(data), count, dtype, op, scratch->data());
  for (int s = 0; s < ring.size - 1; ++s) {
    RETURN_IF_ERROR(step.run(0, s, mod(ring.rank - s, ring.size), mod(ring.rank - s - 1, ring.size)));
  }
  for (int s = 0; s < ring.size - 1; ++s) {
    RETURN_IF_ERROR(step.run(1, s, mod(ring.rank + 1 - s, ring.size), mod(ring.rank - s, ring.size)));
  }
  return okStatus();
}

}  // namespace gradsync::collective
