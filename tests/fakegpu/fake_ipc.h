// SPDX-License-Identifier: Apache-2.0
// The "IPC handle" of the fake CUDA used by tests/fakegpu: "device memory"
// is a memfd mapped shared in the client; its handle names the process and
// descriptor, which the fake daemon maps through /proc/<pid>/fd/<fd>.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace gradsync::fakegpu {

constexpr char kHandleMagic[8] = {'F', 'A', 'K', 'E', 'I', 'P', 'C', '1'};
// The fake GPUs' UUID bytes: device d is "GPU-fa4e0000-0000-0000-0000-0000000000<d + 1>"
// (device 0: kUuidText).
constexpr unsigned char kUuid[16] = {0xfa, 0x4e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
constexpr const char* kUuidText = "GPU-fa4e0000-0000-0000-0000-000000000001";
// Most fake GPUs one process sees.
constexpr int kMaxDevices = 8;

inline std::string uuidText(int device) {
  char text[48];
  std::snprintf(text, sizeof(text), "GPU-fa4e0000-0000-0000-0000-0000000000%02x", device + 1);
  return text;
}

struct Handle {  // fits the 64 bytes of cudaIpcMemHandle_t
  char magic[8];
  int64_t pid;
  int64_t fd;
  uint64_t bytes;
};
static_assert(sizeof(Handle) <= 64, "fits an IPC handle");

}  // namespace gradsync::fakegpu
