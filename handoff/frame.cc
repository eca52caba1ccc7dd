// SPDX-License-Identifier: Apache-2.0
#include "handoff/frame.h"

#include <cstring>

#include "handoff/fd_passing.h"
#include "handoff/shm_layout.h"

namespace gradsync::handoff {

std::string encodeFrame(const google::protobuf::MessageLite& message) {
  const std::string payload = message.SerializeAsString();
  FrameHeader header{kFrameMagic, static_cast<uint32_t>(payload.size())};
  std::string frame(sizeof(header), '\0');
  std::memcpy(frame.data(), &header, sizeof(header));
  return frame + payload;
}

Status decodeFrame(const std::string& bytes, google::protobuf::MessageLite* message) {
  FrameHeader header{};
  if (bytes.size() < sizeof(header))
    return invalidArgument("hand-off frame of " + std::to_string(bytes.size()) + " bytes");
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (header.magic != kFrameMagic) return invalidArgument("bad hand-off frame magic");
  if (header.length > kMaxFramePayload) {
    return invalidArgument("hand-off frame payload of " + std::to_string(header.length) + " bytes (limit " +
                           std::to_string(kMaxFramePayload) + ")");
  }
  if (bytes.size() - sizeof(header) != header.length) {
    return invalidArgument("hand-off frame says " + std::to_string(header.length) + " bytes but carries " +
                           std::to_string(bytes.size() - sizeof(header)));
  }
  if (!message->ParseFromArray(bytes.data() + sizeof(header), static_cast<int>(header.length))) {
    return invalidArgument("hand-off frame does not parse as " + message->GetTypeName());
  }
  return okStatus();
}

Status exchangeFrames(int sock, const google::protobuf::MessageLite& request, google::protobuf::MessageLite* response,
                      std::chrono::milliseconds timeout, const std::vector<int>& fds) {
  const std::string frame = encodeFrame(request);
  if (frame.size() > sizeof(FrameHeader) + kMaxFramePayload) return invalidArgument("hand-off request too large");
  RETURN_IF_ERROR(sendWithFds(sock, frame.data(), frame.size(), fds));
  std::string reply;
  RETURN_IF_ERROR(recvMessage(sock, &reply, sizeof(FrameHeader) + kMaxFramePayload, timeout));
  if (reply.empty()) return unavailable("gradsyncd closed the hand-off connection");
  return decodeFrame(reply, response);
}

}  // namespace gradsync::handoff
