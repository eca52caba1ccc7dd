// SPDX-License-Identifier: Apache-2.0
// A GPU's UUID as nvidia-smi prints it, the form in which the daemon and its
// clients name GPUs to each other.
#pragma once

#include <string>

namespace gradsync {

// "GPU-" + 8-4-4-4-12 hex digits of 16 raw UUID bytes.
std::string formatGpuUuid(const unsigned char bytes[16]);

}  // namespace gradsync
