// SPDX-License-Identifier: Apache-2.0
#include "daemon/collective/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "daemon/collective/reduce/cpu_reduce.h"

namespace gradsync::collective {
namespace {

using transport::RequestPtr;

int mod(int a, int n) { return ((a % n) + n) % n; }

// The element ranges of each ring position's part of the buffer, each cut
// into chunks of at most `chunk` elements (the unit of one transfer).
using Chunks = std::vector<ElementRange>;

std::vector<Chunks> chunked(const std::vector<std::vector<ElementRange>>& parts, size_t chunk) {
  std::vector<Chunks> out(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    for (const ElementRange& range : parts[i]) {
      for (size_t done = 0; done < range.count; done += chunk) {
        out[i].push_back({range.begin + done, std::min(chunk, range.count - done)});
      }
    }
  }
  return out;
}

// One step: send part `send` to the right, receive part `recv` from the
// left; phase 0 reduces what arrives into `data`, phase 1 copies it there.
class Step {
 public:
  // `input`: this node's contribution, read where `data` holds nothing of
  // this collective yet (the same buffer for an allreduce).
  Step(const RingContext& ring, const uint8_t* input, uint8_t* data, const std::vector<Chunks>& parts, DataType dtype,
       ReduceOp op, uint8_t* scratch, const char* name)
      : ring_(ring),
        input_(input),
        data_(data),
        parts_(parts),
        dtype_(dtype),
        op_(op),
        scratch_(scratch),
        esize_(elementSize(dtype)),
        name_(name) {}

  Status run(int phase, int step, int send_index, int recv_index) {
    const Chunks& send = parts_[send_index];
    const Chunks& recv = parts_[recv_index];
    const std::string what = std::string(name_) + " step " + std::to_string(phase == 0 ? step : ring_.size - 1 + step) +
                             " with " + ring_.left->name() + " (left) and " + ring_.right->name() + " (right)";
    // Step 0 of phase 0 sends this node's own contribution; every later
    // send is what the step before reduced (or received) into `data`.
    const uint8_t* from = phase == 0 && step == 0 ? input_ : data_;
    std::vector<RequestPtr> sends;
    for (size_t c = 0; c < send.size(); ++c) {
      sends.push_back(ring_.right->isend(from + send[c].begin * esize_, send[c].count * esize_,
                                         ringTag(ring_.tag_key, ring_.id, phase, step, c, ring_.rank)));
    }
    RequestPtr pending = !recv.empty() ? postRecv(phase, step, recv, 0) : nullptr;
    for (size_t c = 0; c < recv.size(); ++c) {
      RequestPtr next = c + 1 < recv.size() ? postRecv(phase, step, recv, c + 1) : nullptr;
      transport::Request* one[] = {pending.get()};
      RETURN_IF_ERROR(ring_.transport->waitAll(one, 1, ring_.deadline, what));
      if (phase == 0) reduceChunk(recv[c], c);
      pending = std::move(next);
    }
    std::vector<transport::Request*> raw;
    for (auto& s : sends) raw.push_back(s.get());
    return ring_.transport->waitAll(raw.data(), raw.size(), ring_.deadline, what);
  }

 private:
  // Phase 0 receives into the scratch half of this chunk's parity; phase 1
  // straight into place. Chunks are at most half the scratch.
  RequestPtr postRecv(int phase, int step, const Chunks& recv, size_t c) {
    uint8_t* target = phase == 0 ? scratch_ + (c % 2) * (scratchBytes() / 2) : data_ + recv[c].begin * esize_;
    return ring_.left->irecv(target, recv[c].count * esize_,
                             ringTag(ring_.tag_key, ring_.id, phase, step, c, mod(ring_.rank - 1, ring_.size)));
  }
  size_t scratchBytes() const { return 2 * std::max<size_t>(1, ring_.chunk_bytes / esize_) * esize_; }

  void reduceChunk(const ElementRange& chunk, size_t c) {
    // A part is received (and reduced) once per ring pass: its local side
    // is still this node's own contribution.
    const void* inputs[] = {input_ + chunk.begin * esize_, scratch_ + (c % 2) * (scratchBytes() / 2)};
    void* outputs[] = {data_ + chunk.begin * esize_};
    reduce::ReduceArgs args;
    args.dtype = dtype_;
    args.op = op_;
    args.inputs = inputs;
    args.num_inputs = 2;
    args.outputs = outputs;
    args.num_outputs = 1;
    reduce::reduceRange(args, 0, chunk.count);
  }

  const RingContext& ring_;
  const uint8_t* input_;
  uint8_t* data_;
  const std::vector<Chunks>& parts_;
  DataType dtype_;
  ReduceOp op_;
  uint8_t* scratch_;
  size_t esize_;
  const char* name_;
};

// The ring's chunk size for `parts`: at most 65535 chunks a part (requests
// in flight). Sizes `scratch` for it; returns the chunk in elements.
size_t prepare(RingContext* ring, const std::vector<std::vector<ElementRange>>& parts, size_t esize,
               std::vector<uint8_t>* scratch) {
  size_t largest = 0;
  for (const auto& part : parts) {
    size_t elements = 0;
    for (const ElementRange& range : part) elements += range.count;
    largest = std::max(largest, elements + part.size());  // each range may add a partial chunk
  }
  ring->chunk_bytes = std::max(ring->chunk_bytes, (largest / 0xffff + 1) * esize);
  const size_t chunk = std::max<size_t>(1, ring->chunk_bytes / esize);
  scratch->resize(2 * chunk * esize);
  return chunk;
}

}  // namespace

uint64_t batchTagBits(uint64_t epoch, uint64_t batch) {
  return (uint64_t{1} << 63) | ((epoch & 0xf) << 59) | ((batch >> 40 != 0 ? uint64_t{1} : 0) << 58) |
         ((batch & 0x3ffff) << 40);
}

uint64_t ringTag(const SipKey& key, const TransferId& id, int phase, int step, size_t chunk, int sender) {
  // Every field whole: tags of different phases, steps (a pairwise
  // exchange's step is from * n + to), senders or collectives never alias.
  // UCX matches tags across all of a worker's endpoints.
  const uint64_t plain[7] = {static_cast<uint64_t>(id.space),
                             id.epoch,
                             id.batch,
                             (static_cast<uint64_t>(id.response) << 32) | id.call,
                             (static_cast<uint64_t>(static_cast<uint32_t>(phase)) << 32) | static_cast<uint32_t>(step),
                             static_cast<uint64_t>(chunk),
                             static_cast<uint64_t>(static_cast<uint32_t>(sender))};
  const uint64_t hash = sipHash24(key, plain, sizeof(plain));
  if (id.space == TransferId::Space::kControl) return hash & ~(uint64_t{1} << 63);
  return batchTagBits(id.epoch, id.batch) | (hash & ~kBatchTagMask);
}

Status ringAllreduce(const RingContext& ring, void* data, size_t count, DataType dtype, ReduceOp op,
                     std::vector<uint8_t>* scratch) {
  if (ring.size <= 1 || count == 0) return okStatus();
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("ring allreduce: unknown dtype");
  std::vector<std::vector<ElementRange>> parts(ring.size);
  for (int i = 0; i < ring.size; ++i) {
    const size_t begin = count * static_cast<size_t>(i) / static_cast<size_t>(ring.size);
    const size_t end = count * static_cast<size_t>(i + 1) / static_cast<size_t>(ring.size);
    parts[i].push_back({begin, end - begin});
  }
  RingContext ctx = ring;
  const auto chunks = chunked(parts, prepare(&ctx, parts, esize, scratch));
  auto* bytes = static_cast<uint8_t*>(data);
  Step step(ctx, bytes, bytes, chunks, dtype, op, scratch->data(), "ring allreduce");
  for (int s = 0; s < ring.size - 1; ++s) {
    RETURN_IF_ERROR(step.run(0, s, mod(ring.rank - s, ring.size), mod(ring.rank - s - 1, ring.size)));
  }
  for (int s = 0; s < ring.size - 1; ++s) {
    RETURN_IF_ERROR(step.run(1, s, mod(ring.rank + 1 - s, ring.size), mod(ring.rank - s, ring.size)));
  }
  return okStatus();
}

Status ringReduceScatter(const RingContext& ring, const void* input, void* data, DataType dtype, ReduceOp op,
                         const std::vector<std::vector<ElementRange>>& owned, std::vector<uint8_t>* scratch) {
  if (ring.size <= 1) {
    if (input != data && !owned.empty()) {
      for (const ElementRange& range : owned[0]) {
        std::memcpy(static_cast<uint8_t*>(data) + range.begin * elementSize(dtype),
                    static_cast<const uint8_t*>(input) + range.begin * elementSize(dtype),
                    range.count * elementSize(dtype));
      }
    }
    return okStatus();
  }
  if (static_cast<int>(owned.size()) != ring.size) {
    return invalidArgument("ring reduce-scatter: " + std::to_string(owned.size()) + " parts for a ring of " +
                           std::to_string(ring.size));
  }
  if (op == v1::AVERAGE) op = v1::SUM;
  const size_t esize = elementSize(dtype);
  if (esize == 0) return invalidArgument("ring reduce-scatter: unknown dtype");
  RingContext ctx = ring;
  const auto chunks = chunked(owned, prepare(&ctx, owned, esize, scratch));
  Step step(ctx, static_cast<const uint8_t*>(input), static_cast<uint8_t*>(data), chunks, dtype, op, scratch->data(),
            "ring reduce-scatter");
  // Node k first sends its own contribution to part k-1; the last part it
  // receives, after n-1 steps, is its own, reduced over every node.
  for (int s = 0; s < ring.size - 1; ++s) {
    RETURN_IF_ERROR(step.run(0, s, mod(ring.rank - s - 1, ring.size), mod(ring.rank - s - 2, ring.size)));
  }
  return okStatus();
}

}  // namespace gradsync::collective
