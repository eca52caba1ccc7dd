// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/bench_memory.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

namespace gradsync::bench {
namespace {

class ArenaMemory : public BenchMemory {
 public:
  explicit ArenaMemory(Client& client) : client_(client) {}
  float* allocate(uint64_t bytes) override {
    auto* p = static_cast<float*>(client_.alloc(bytes));
    if (p == nullptr)
      std::fprintf(stderr, "cannot allocate %llu bytes in the arena (GRADSYNC_ARENA_BYTES)\n",
                   static_cast<unsigned long long>(bytes));
    return p;
  }
  void fill(float* data, size_t count, float value) override { std::fill(data, data + count, value); }
  std::vector<float> read(const float* data, size_t count) override { return {data, data + count}; }
  const char* describe() const override { return "zero-copy (tensors in the arena)"; }

 private:
  Client& client_;
};

class HeapMemory : public ArenaMemory {
 public:
  explicit HeapMemory(Client& client) : ArenaMemory(client) {}
  float* allocate(uint64_t bytes) override {
    heaps_.emplace_back(bytes / 4 + 1, 0.0f);
    return heaps_.back().data();
  }
  const char* describe() const override { return "copy (client copies in and out)"; }

 private:
  std::deque<std::vector<float>> heaps_;
};

class CudaMemory : public BenchMemory {
 public:
  ~CudaMemory() override {
    for (void* p : allocations_) (void)cudaFree(p);
  }
  float* allocate(uint64_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<uint64_t>(bytes, 4));
    if (err != cudaSuccess) {
      std::fprintf(stderr, "cudaMalloc of %llu bytes: %s\n", static_cast<unsigned long long>(bytes),
                   cudaGetErrorString(err));
      return nullptr;
    }
    allocations_.push_back(p);
    return static_cast<float*>(p);
  }
  void fill(float* data, size_t count, float value) override {
    std::vector<float> host(count, value);
    (void)cudaMemcpy(data, host.data(), count * 4, cudaMemcpyHostToDevice);
  }
  std::vector<float> read(const float* data, size_t count) override {
    std::vector<float> host(count);
    (void)cudaMemcpy(host.data(), data, count * 4, cudaMemcpyDeviceToHost);
    return host;
  }
  // The operations run on the legacy default stream (gradsync_op_t.stream =
  // NULL): waiting for it is waiting for gradsyncd's result.
  void finish() override { (void)cudaStreamSynchronize(nullptr); }
  int device() const override { return GRADSYNC_DEVICE_CUDA; }
  const char* describe() const override { return "CUDA (device memory through CUDA IPC)"; }

 private:
  std::vector<void*> allocations_;
};

}  // namespace

std::unique_ptr<BenchMemory> makeBenchMemory(const std::string& kind, Client& client, int local_rank) {
  if (kind == "arena") return std::make_unique<ArenaMemory>(client);
  if (kind == "heap") return std::make_unique<HeapMemory>(client);
  if (kind == "cuda") {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      std::fprintf(stderr, "gradsync_bench --device cuda: no CUDA device (%s)\n",
                   err == cudaSuccess ? "none found" : cudaGetErrorString(err));
      return nullptr;
    }
    if (cudaSetDevice(local_rank % count) != cudaSuccess) return nullptr;
    return std::make_unique<CudaMemory>();
  }
  std::fprintf(stderr, "unknown memory kind %s\n", kind.c_str());
  return nullptr;
}

}  // namespace gradsync::bench
