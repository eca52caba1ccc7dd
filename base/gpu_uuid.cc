// SPDX-License-Identifier: Apache-2.0
#include "base/gpu_uuid.h"

#include <cstdio>

namespace gradsync {

std::string formatGpuUuid(const unsigned char b[16]) {
  char text[64];
  std::snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

}  // namespace gradsync
