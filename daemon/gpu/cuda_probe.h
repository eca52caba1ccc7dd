// SPDX-License-Identifier: Apache-2.0
// Asks the CUDA runtime how many devices this node has. No GPU, or no driver,
// is a normal state (0 devices), never an error.
#pragma once

#include <string>

namespace gradsync::gpu {

struct CudaProbe {
  int devices = 0;
  std::string note;  // why there are none, e.g. "no CUDA driver (error 35)"
};

CudaProbe probeCuda();

}  // namespace gradsync::gpu
