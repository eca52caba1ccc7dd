// SPDX-License-Identifier: Apache-2.0
// The hand-off socket's wire format, shared by the daemon and the client
// library. Both ends run on the same host: native byte order, fixed sizes.
//
//   client -> daemon: HandoffHello (exactly sizeof bytes) with the arena memfd
//                     attached as SCM_RIGHTS.
//   daemon -> client: HandoffReply (exactly sizeof bytes).
// The connection then stays open, silent, until the session ends; its closing
// tells the daemon that the rank is gone.
#pragma once

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

struct HandoffReply {
  uint32_t magic;
  int32_t code;        // StatusCode: 0 = accepted
  char message[240];   // NUL-terminated cause when code != 0
};

static_assert(sizeof(HandoffHello) == 48, "wire layout");
static_assert(sizeof(HandoffReply) == 248, "wire layout");

}  // namespace gradsync::handoff
