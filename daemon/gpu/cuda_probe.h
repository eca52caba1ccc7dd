// SPDX-License-Identifier: Apache-2.0
// Asks the CUDA runtime how many devices this node has. No GPU, or no driver,
// is a normal state (0 devices), never an error.
#pragma once

#include <string>

namespace gradsync::gpu {

struct CudaProbe {
  int devices = 0;
  std::string note;      // why there are none, e.g. "no CUDA driver (error 35)"
  int nccl_version = 0;  // e.g. 22807 for 2.28.7 (NCCL answers without a GPU)
};

CudaProbe probeCuda();

}  // namespace gradsync::gpu
