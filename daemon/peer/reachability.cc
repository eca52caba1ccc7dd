// SPDX-License-Identifier: Apache-2.0
#include "daemon/peer/reachability.h"

#include <cstdint>

namespace gradsync::peer {

std::vector<bool> probeReachable(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                 std::chrono::system_clock::time_point deadline) {
  std::vector<bool> reachable(channels.size(), false);
  grpc::CompletionQueue queue;
  size_t pending = 0;
  // Watches channel i from `state` on; false when its fate is known.
  const auto watch = [&](size_t i, grpc_connectivity_state state) {
    if (state == GRPC_CHANNEL_READY) {
      reachable[i] = true;
      return false;
    }
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    channels[i]->NotifyOnStateChange(state, deadline, &queue, reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
    ++pending;
    return true;
  };
  for (size_t i = 0; i < channels.size(); ++i) watch(i, channels[i]->GetState(/*try_to_connect=*/true));
  void* tag = nullptr;
  bool changed = false;
  while (pending > 0 && queue.Next(&tag, &changed)) {
    --pending;
    const size_t i = static_cast<size_t>(reinterpret_cast<uintptr_t>(tag));
    if (changed) watch(i, channels[i]->GetState(/*try_to_connect=*/false));  // else: the deadline passed
  }
  queue.Shutdown();
  while (queue.Next(&tag, &changed)) {
  }
  return reachable;
}

}  // namespace gradsync::peer
