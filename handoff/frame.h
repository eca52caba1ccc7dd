// SPDX-License-Identifier: Apache-2.0
// Frames on the hand-off socket after the hello: a FrameHeader and a
// serialized protobuf message in one SOCK_SEQPACKET message (shm_layout.h).
#pragma once

#include <google/protobuf/message_lite.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace gradsync::handoff {

std::string encodeFrame(const google::protobuf::MessageLite& message);
// INVALID_ARGUMENT for a bad magic, a length that disagrees with the bytes,
// an oversized payload or a payload that does not parse.
Status decodeFrame(const std::string& bytes, google::protobuf::MessageLite* message);

// One request, one response, bounded by `timeout` (client side); `fds`
// travel with the request.
Status exchangeFrames(int sock, const google::protobuf::MessageLite& request, google::protobuf::MessageLite* response,
                      std::chrono::milliseconds timeout, const std::vector<int>& fds = {});

}  // namespace gradsync::handoff
