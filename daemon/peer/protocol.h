// SPDX-License-Identifier: Apache-2.0
// The version of what the daemons of one job say to each other: the Peer
// service's messages and what they mean, the data plane's tags. Each
// daemon states the version it speaks and the oldest it works with when it
// joins (JoinJobRequest), answers a join (JoinJobResponse) and opens its
// coordination stream (Hello); a job whose daemons cannot work together is
// refused at join, naming both versions and both nodes, so that a rolling
// update of the DaemonSet fails loudly instead of stalling.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace gradsync::peer {

// 2: data-plane tags named by batch, response, call and sender. A daemon
// from before versions sends none (0: version 1, oldest 1).
inline constexpr uint32_t kPeerProtocol = 2;
inline constexpr uint32_t kOldestPeerProtocol = 2;

struct ProtocolRange {
  uint32_t speaks = kPeerProtocol;
  uint32_t oldest = kOldestPeerProtocol;
  // As a message carries it: 0 (absent) is a daemon from before versions.
  static ProtocolRange fromWire(uint32_t speaks, uint32_t oldest) {
    if (speaks == 0) return {1, 1};
    return {speaks, oldest == 0 ? speaks : oldest};
  }
  // The range a message says (JoinJobRequest, JoinJobResponse, Hello).
  template <typename Message>
  static ProtocolRange of(const Message& message) {
    return fromWire(message.protocol_version(), message.oldest_protocol_version());
  }
  // Says this range in `message`.
  template <typename Message>
  void stamp(Message* message) const {
    message->set_protocol_version(speaks);
    message->set_oldest_protocol_version(oldest);
  }
};

// OK when a daemon speaking `mine` (this one, `me`) and one speaking
// `theirs` (`them`) can run job `job` together: each speaks a version the
// other still works with. Otherwise FAILED_PRECONDITION naming both.
inline Status checkProtocol(const std::string& job, const ProtocolRange& mine, const std::string& me,
                            const ProtocolRange& theirs, const std::string& them) {
  if (theirs.speaks >= mine.oldest && mine.speaks >= theirs.oldest) return okStatus();
  const auto range = [](const ProtocolRange& r) {
    return "peer protocol " + std::to_string(r.speaks) + " (works with " + std::to_string(r.oldest) + " and later)";
  };
  return failedPrecondition("job '" + job + "': " + them + " speaks " + range(theirs) + ", " + me + " speaks " +
                            range(mine) + ": daemons of these versions cannot run one job (update every node's " +
                            "gradsyncd to one release)");
}

}  // namespace gradsync::peer
