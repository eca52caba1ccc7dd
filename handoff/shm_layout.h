// SPDX-License-Identifier: Apache-2.0
// The hand-off socket's wire format, shared by the daemon and the client
// library. Both ends run on the same host: native byte order, fixed sizes.
//
//   client -> daemon: HandoffHello (exactly sizeof bytes) with the arena memfd
//                     attached as SCM_RIGHTS.
//   daemon -> client: HandoffReply (exactly sizeof bytes).
// The connection then stays open until the session ends; its closing tells
// the daemon that the rank is gone. Meanwhile the client may send frames
// (FrameHeader + a serialized v1::HandoffRequest, one message each), and the
// daemon answers each with one frame holding a v1::HandoffResponse.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync::handoff {

constexpr uint32_t kHandoffMagic = 0x47534831;  // "GSH1"
constexpr uint32_t kHandoffVersion = 1;
constexpr uint32_t kSessionSecretBytes = 32;
// Every offset handed over is aligned to this (the client allocator's unit).
constexpr uint64_t kArenaAlignment = 64;

struct HandoffHello {
  uint32_t magic;
  uint32_t version;
  uint64_t session_id;
  uint8_t secret[kSessionSecretBytes];
};

// CudaTensorRef values with a meaning of their own (control.proto): a tensor
// without elements (no memory), and an operation without events.
constexpr uint64_t kNoCudaBuffer = 0;
constexpr uint32_t kNoEventSlot = 0xffffffffu;

constexpr uint32_t kFrameMagic = 0x47534632;  // "GSF2"
// Most descriptors one hand-off message carries (the kernel's SCM_MAX_FD
// is 253): a cuMem export's chunks (CudaBufferExport.chunk_bytes).
constexpr size_t kMaxFdsPerFrame = 250;
constexpr uint32_t kMaxFramePayload = 1 << 17;  // 1024 event handles fit with room to spare

struct FrameHeader {
  uint32_t magic;
  uint32_t length;  // payload bytes that follow
};

struct HandoffReply {
  uint32_t magic;
  int32_t code;       // StatusCode: 0 = accepted
  char message[240];  // NUL-terminated cause when code != 0
};

// The doorbell rings at the start of every arena (the client allocates
// tensors after kControlBytes). They carry the hot messages without gRPC:
// serialized v1::Enqueue from client to daemon, serialized v1::Done back.
// Anything that does not fit a slot, or finds its ring full, goes over the
// session stream instead, so the stream remains the complete protocol.
constexpr uint32_t kRingMagic = 0x47535231;  // "GSR1"
constexpr uint32_t kRingSlots = 256;         // power of two
constexpr uint32_t kRingSlotBytes = 512;
constexpr uint64_t kControlBytes = 1 << 20;

struct alignas(64) RingIndices {
  uint32_t head;     // next slot the consumer reads (written by the consumer)
  uint32_t tail;     // next slot the producer writes (written by the producer; futex word)
  uint32_t waiting;  // number of consumer threads sleeping on `tail`
};

struct RingSlot {
  uint32_t length;  // bytes used in `bytes`
  uint8_t bytes[kRingSlotBytes - sizeof(uint32_t)];
};

struct ArenaControl {
  uint32_t magic;  // kRingMagic when the client offers the rings
  uint32_t version;
  alignas(64) RingIndices submit;    // client -> daemon
  alignas(64) RingIndices complete;  // daemon -> client
  RingSlot submit_slots[kRingSlots];
  RingSlot complete_slots[kRingSlots];
};

static_assert(sizeof(ArenaControl) <= kControlBytes, "control block fits its reservation");
static_assert(sizeof(HandoffHello) == 48, "wire layout");
static_assert(sizeof(HandoffReply) == 248, "wire layout");

}  // namespace gradsync::handoff
