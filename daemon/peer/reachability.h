// SPDX-License-Identifier: Apache-2.0
// Which of several daemons a channel reaches, probed all at once on the
// caller's thread (one completion queue, no thread per peer): a leader
// election asks the lowest reachable candidate, not each in turn with a
// deadline of its own.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <vector>

namespace gradsync::peer {

// Whether each channel connects before `deadline`. A channel whose
// connection fails (refused, no route) is unreachable at once; one still
// connecting at the deadline (its packets dropped) is unreachable then.
std::vector<bool> probeReachable(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                 std::chrono::system_clock::time_point deadline);

}  // namespace gradsync::peer
