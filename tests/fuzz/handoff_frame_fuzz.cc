// SPDX-License-Identifier: Apache-2.0
// Frames on the hand-off socket: the daemon decodes HandoffRequest (CUDA
// attach, buffer export and release) from any client, the client decodes
// HandoffResponse. Both must reject, never crash on, any bytes.
#include "handoff/frame.h"
#include "proto/gradsync/v1/control.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  v1::HandoffRequest request;
  if (handoff::decodeFrame(bytes, &request).isOk()) {
    // A decoded frame re-encodes to a frame that decodes the same.
    v1::HandoffRequest again;
    if (!handoff::decodeFrame(handoff::encodeFrame(request), &again).isOk()) __builtin_trap();
  }
  v1::HandoffResponse response;
  (void)handoff::decodeFrame(bytes, &response);
  return 0;
}
