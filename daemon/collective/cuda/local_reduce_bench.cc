// SPDX-License-Identifier: Apache-2.0
// The local reduction kernel alone on the GPU (a benchmark, not a test; it
// needs a GPU): an in-place float32 SUM of N buffers of one GPU (what N ranks
// sharing it hand the daemon), timed with CUDA events against a
// device-to-device copy of the same size. Memory traffic: N reads and N
// writes of the buffer per reduction, 2 per copy.
//
//   local_reduce_bench [--mib M] [--inputs N] [--iterations I]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/collective/cuda/local_reduce.h"

namespace {

bool ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
  return false;
}

template <typename F>
double medianMs(int iterations, cudaStream_t stream, F run) {
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  std::vector<float> ms;
  for (int i = 0; i < iterations + 2; ++i) {
    cudaEventRecord(begin, stream);
    run();
    cudaEventRecord(end, stream);
    cudaEventSynchronize(end);
    float t = 0;
    cudaEventElapsedTime(&t, begin, end);
    if (i >= 2) ms.push_back(t);  // after two warm-up runs
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  int inputs = 2, iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--inputs")) inputs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::atoi(argv[i + 1]);
  }
  if (inputs < 1 || inputs > gradsync::cuda::kMaxLocalBuffers || mib < 1 || iterations < 1) {
    std::fprintf(stderr, "need 1 <= --inputs <= %d, --mib >= 1, --iterations >= 1\n", gradsync::cuda::kMaxLocalBuffers);
    return 64;
  }
  const size_t bytes = mib << 20;
  cudaStream_t stream;
  if (!ok(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
  std::vector<void*> buffers(inputs + 1);
  for (auto& b : buffers) {
    if (!ok(cudaMalloc(&b, bytes), "cudaMalloc")) return 1;
    cudaMemset(b, 0, bytes);
  }
  const double copy_ms = medianMs(iterations, stream, [&] {
    cudaMemcpyAsync(buffers[inputs], buffers[0], bytes, cudaMemcpyDeviceToDevice, stream);
  });
  gradsync::cuda::LocalReduceArgs args;
  for (int k = 0; k < inputs; ++k) args.inputs[k] = args.outputs[k] = buffers[k];
  args.num_inputs = args.num_outputs = inputs;
  args.count = bytes / sizeof(float);
  std::string error;
  const double reduce_ms = medianMs(iterations, stream, [&] {
    const std::string launched = gradsync::cuda::launchLocalReduce(args, stream);
    if (!launched.empty()) error = launched;
  });
  if (!error.empty() || !ok(cudaStreamSynchronize(stream), "the kernels")) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const double copy_tbs = 2.0 * bytes / (copy_ms * 1e-3) / 1e12;
  const double reduce_tbs = 2.0 * inputs * bytes / (reduce_ms * 1e-3) / 1e12;
  std::printf(
      "%zu MiB, %d inputs in place: reduce %.1f us (%.2f TB/s of memory traffic), D2D copy %.1f us (%.2f TB/s): "
      "%.0f %% of the copy's\n",
      mib, inputs, reduce_ms * 1e3, reduce_tbs, copy_ms * 1e3, copy_tbs, 100.0 * reduce_tbs / copy_tbs);
  return 0;
}
