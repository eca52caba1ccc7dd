// SPDX-License-Identifier: Apache-2.0
// Worker scenario for the CUDA path end to end without a GPU: tensors live
// in "device memory" of the fake CUDA driver (tests/fakegpu), which this
// process loads first ($GRADSYNC_TEST_FAKE_LIBCUDA), and go to a gradsyncd
// over a host-memory GPU. Every collective, checked by reading the memory.
#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "tests/integration/worker_util.h"

namespace gradsync::worker {
namespace {

using FakeMalloc = void* (*)(size_t);

// A symbol of the fake CUDA driver, which this process loads first.
void* fakeSymbol(const char* name) {
  const char* path = std::getenv("GRADSYNC_TEST_FAKE_LIBCUDA");
  if (path == nullptr) return nullptr;
  void* handle = ::dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", path, ::dlerror());
    return nullptr;
  }
  return ::dlsym(handle, name);
}

FakeMalloc loadFakeDriver() { return reinterpret_cast<FakeMalloc>(fakeSymbol("gradsync_fake_cuda_malloc")); }

// `shape` must outlive the operation's start (the op points into it).
gradsync_op_t cudaOp(int collective, const char* name, void* data, int dtype, const std::vector<int64_t>& shape) {
  gradsync_op_t op = makeOp(collective, name, data, dtype, shape);
  op.device = GRADSYNC_DEVICE_CUDA;
  op.stream = nullptr;
  return op;
}

int run(Client& c, gradsync_op_t op) {
  Operation h;
  WORKER_OK(c.start(op, &h));
  WORKER_OK(h.wait(30));
  return 0;
}

// Fake device memory as `args` say: "vmm": cuMem memory in chunks of
// kVmmChunk (as PyTorch's expandable segments); "pool [G]": from a
// cudaMallocAsync pool (on fake GPU local rank % G); "gpus G": on fake GPU
// (local rank % G), as on a node whose ranks use G GPUs; else cudaMalloc
// memory on GPU 0. Null (with a message) without the fake driver.
constexpr size_t kVmmChunk = 16384;
struct FakeAllocator {
  std::function<uint8_t*(size_t)> allocate;
  int device = 0;
  const char* kind = "cudaMalloc";
};

FakeAllocator fakeAllocator(const Client& c, const std::vector<std::string>& args) {
  using VmmMalloc = void* (*)(size_t, size_t);
  using MallocOn = void* (*)(size_t, int);
  auto fake_malloc = reinterpret_cast<FakeMalloc>(fakeSymbol("gradsync_fake_cuda_malloc"));
  auto vmm_malloc = reinterpret_cast<VmmMalloc>(fakeSymbol("gradsync_fake_cuda_malloc_vmm"));
  auto malloc_on = reinterpret_cast<MallocOn>(fakeSymbol("gradsync_fake_cuda_malloc_on"));
  FakeAllocator out;
  if (fake_malloc == nullptr || vmm_malloc == nullptr || malloc_on == nullptr) {
    std::fprintf(stderr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)\n");
    return out;
  }
  if (!args.empty() && args[0] == "pool") {
    using PoolMalloc = void* (*)(size_t, int);
    auto pool_malloc = reinterpret_cast<PoolMalloc>(fakeSymbol("gradsync_fake_cuda_malloc_pool"));
    const char* local = std::getenv("GRADSYNC_LOCAL_RANK");
    const int gpus = args.size() > 1 ? std::max(1, std::atoi(args[1].c_str())) : 1;
    out.kind = "cudaMallocAsync";
    out.device = (local != nullptr ? std::atoi(local) : c.rank()) % gpus;
    const int device = out.device;
    if (pool_malloc != nullptr) {
      out.allocate = [=](size_t bytes) { return static_cast<uint8_t*>(pool_malloc(bytes, device)); };
    }
  } else if (!args.empty() && args[0] == "vmm") {
    out.kind = "cuMem";
    out.allocate = [=](size_t bytes) { return static_cast<uint8_t*>(vmm_malloc(bytes, kVmmChunk)); };
  } else if (args.size() == 2 && args[0] == "gpus") {
    const char* local = std::getenv("GRADSYNC_LOCAL_RANK");
    out.device = (local != nullptr ? std::atoi(local) : c.rank()) % std::max(1, std::atoi(args[1].c_str()));
    const int device = out.device;
    out.allocate = [=](size_t bytes) { return static_cast<uint8_t*>(malloc_on(bytes, device)); };
  } else {
    out.allocate = [=](size_t bytes) { return static_cast<uint8_t*>(fake_malloc(bytes)); };
  }
  return out;
}

}  // namespace

uint8_t* fakeDeviceMemory(const Client& c, int gpus, size_t bytes) {
  const FakeAllocator allocator = fakeAllocator(c, {"gpus", std::to_string(gpus)});
  return allocator.allocate ? allocator.allocate(bytes) : nullptr;
}

// Every collective on fake device memory (args: fakeAllocator's). With
// "vmm", tensors cross chunks, and after the collectives the chunk under
// one tensor is replaced, as an allocator that frees and maps again: an
// allreduce on the new memory must see the new values.
int fakeCuda(Client& c, const std::vector<std::string>& args) {
  const bool vmm = !args.empty() && args[0] == "vmm";
  using Remap = int (*)(void*);
  auto remap = reinterpret_cast<Remap>(fakeSymbol("gradsync_fake_cuda_remap"));
  const FakeAllocator allocator = fakeAllocator(c, args);
  WORKER_CHECK(allocator.allocate && remap != nullptr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  const auto& allocate = allocator.allocate;
  const int device = allocator.device;
  const int n = c.size(), me = c.rank();
  auto* a = allocate(1 << 20);  // one allocation, several tensors
  auto* b = allocate(1 << 16);  // another
  WORKER_CHECK(a != nullptr && b != nullptr, "fake cudaMalloc failed");

  // Allreduce, float32 sum, at an offset inside the allocation.
  auto* x = reinterpret_cast<float*>(a + 4096);
  for (int i = 0; i < 1000; ++i) x[i] = static_cast<float>(me + 1 + i % 7);
  const std::vector<int64_t> s1000 = {1000}, s16 = {16}, s_mine = {me + 1, 2}, s_n = {n}, s_rows = {2 * n + 1, 3};
  if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "cuda.sum", x, GRADSYNC_FLOAT32, s1000))) return 1;
  for (int i = 0; i < 1000; ++i) {
    const float want = n * (n + 1) / 2.0f + n * (i % 7);
    WORKER_CHECK(x[i] == want, "sum element %d: %g, want %g", i, x[i], want);
  }
  // Allreduce, int64 max, in the other allocation.
  auto* y = reinterpret_cast<int64_t*>(b);
  for (int i = 0; i < 16; ++i) y[i] = me * 100 + i;
  gradsync_op_t max = cudaOp(GRADSYNC_ALLREDUCE, "cuda.max", y, GRADSYNC_INT64, s16);
  max.reduce_op = GRADSYNC_MAX;
  if (run(c, max)) return 1;
  WORKER_CHECK(y[15] == (n - 1) * 100 + 15, "max: %lld", static_cast<long long>(y[15]));

  // Broadcast from the last rank.
  auto* d = reinterpret_cast<double*>(a + 65536);
  for (int i = 0; i < 16; ++i) d[i] = me * 1000.0 + i;
  gradsync_op_t bcast = cudaOp(GRADSYNC_BROADCAST, "cuda.bcast", d, GRADSYNC_FLOAT64, s16);
  bcast.root_rank = n - 1;
  if (run(c, bcast)) return 1;
  WORKER_CHECK(d[3] == (n - 1) * 1000.0 + 3, "broadcast: %g", d[3]);

  // Ragged allgather into a caller-sized output.
  auto* mine = reinterpret_cast<int32_t*>(a + 131072);
  for (int i = 0; i < 2 * (me + 1); ++i) mine[i] = me * 10 + i;
  const int64_t total_rows = n * (n + 1) / 2;
  auto* gathered = reinterpret_cast<int32_t*>(b + 4096);
  gradsync_op_t gather = cudaOp(GRADSYNC_ALLGATHER, "cuda.gather", mine, GRADSYNC_INT32, s_mine);
  gather.output = gathered;
  gather.output_bytes = static_cast<uint64_t>(total_rows) * 2 * 4;
  if (run(c, gather)) return 1;
  for (int r = 0, row = 0; r < n; ++r) {
    for (int i = 0; i < 2 * (r + 1); ++i) {
      WORKER_CHECK(gathered[row * 2 + i] == r * 10 + i, "allgather from rank %d element %d: %d", r, i,
                   gathered[row * 2 + i]);
    }
    row += r + 1;
  }

  // Allgather in which rank 0 has no rows: it travels as an empty CUDA tensor.
  const std::vector<int64_t> s_none_or_two = {me == 0 ? 0 : 2};
  auto* part = reinterpret_cast<float*>(a + 140000);
  for (int i = 0; i < 2; ++i) part[i] = static_cast<float>(me * 10 + i);
  auto* all_parts = reinterpret_cast<float*>(b + 8192);
  gradsync_op_t ragged =
      cudaOp(GRADSYNC_ALLGATHER, "cuda.gather_empty", me == 0 ? nullptr : part, GRADSYNC_FLOAT32, s_none_or_two);
  ragged.output = all_parts;
  ragged.output_bytes = static_cast<uint64_t>(n - 1) * 2 * 4;
  if (run(c, ragged)) return 1;
  for (int r = 1; r < n; ++r) {
    WORKER_CHECK(all_parts[(r - 1) * 2 + 1] == r * 10 + 1, "allgather with an empty rank, from %d: %g", r,
                 all_parts[(r - 1) * 2 + 1]);
  }

  // Alltoall, even split: rank r sends element j to rank j.
  auto* send = reinterpret_cast<float*>(a + 196608);
  auto* receive = reinterpret_cast<float*>(b + 16384);
  for (int j = 0; j < n; ++j) send[j] = static_cast<float>(me * 100 + j);
  gradsync_op_t a2a = cudaOp(GRADSYNC_ALLTOALL, "cuda.alltoall", send, GRADSYNC_FLOAT32, s_n);
  a2a.output = receive;
  a2a.output_bytes = static_cast<uint64_t>(n) * 4;
  if (run(c, a2a)) return 1;
  for (int r = 0; r < n; ++r) WORKER_CHECK(receive[r] == r * 100 + me, "alltoall from %d: %g", r, receive[r]);

  // Reducescatter of 2n+1 rows of 3: the first rank gets the extra row.
  const int rows = 2 * n + 1;
  auto* full = reinterpret_cast<float*>(a + 262144);
  for (int i = 0; i < rows * 3; ++i) full[i] = static_cast<float>(i + me);
  const int my_rows = rows / n + (me < rows % n ? 1 : 0);
  int start = 0;
  for (int r = 0; r < me; ++r) start += rows / n + (r < rows % n ? 1 : 0);
  auto* slice = reinterpret_cast<float*>(b + 32768);
  gradsync_op_t rs = cudaOp(GRADSYNC_REDUCESCATTER, "cuda.rs", full, GRADSYNC_FLOAT32, s_rows);
  rs.reduce_op = GRADSYNC_SUM;
  rs.output = slice;
  rs.output_bytes = static_cast<uint64_t>(my_rows) * 3 * 4;
  if (run(c, rs)) return 1;
  for (int i = 0; i < my_rows * 3; ++i) {
    const float want = static_cast<float>(n * (start * 3 + i) + n * (n - 1) / 2);
    WORKER_CHECK(slice[i] == want, "reducescatter element %d: %g, want %g", i, slice[i], want);
  }

  // The daemon forgets the exports; the next operation exports again.
  WORKER_CHECK(gradsync_release_cuda_exports(c.raw()) == GRADSYNC_OK, "release: %s", gradsync_last_error());
  for (int i = 0; i < 1000; ++i) x[i] = 1.0f;
  if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "cuda.after_release", x, GRADSYNC_FLOAT32, s1000))) return 1;
  WORKER_CHECK(x[999] == static_cast<float>(n), "after release: %g", x[999]);
  if (vmm) {
    // A tensor across three chunks, mapped back to back by the daemon.
    auto* across = reinterpret_cast<float*>(a + kVmmChunk - 4096);
    const std::vector<int64_t> s_across = {8192};
    for (int i = 0; i < 8192; ++i) across[i] = static_cast<float>(me + i % 11);
    if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "cuda.across_chunks", across, GRADSYNC_FLOAT32, s_across))) return 1;
    for (int i = 0; i < 8192; ++i) {
      const float want = n * (n - 1) / 2.0f + n * (i % 11);
      WORKER_CHECK(across[i] == want, "across chunks, element %d: %g, want %g", i, across[i], want);
    }
    // x (at a + 4096) lies in the first chunk: other memory is mapped there
    // now. A view exported before would still show the daemon the old memory.
    WORKER_CHECK(remap(x) == 0, "fake remap failed");
    for (int i = 0; i < 1000; ++i) x[i] = static_cast<float>(me + 2);
    if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "cuda.after_remap", x, GRADSYNC_FLOAT32, s1000))) return 1;
    const float want = n * (n - 1) / 2.0f + 2.0f * n;
    for (int i = 0; i < 1000; ++i) WORKER_CHECK(x[i] == want, "after remap, element %d: %g, want %g", i, x[i], want);
  }
  std::fprintf(stderr, "[rank %d] fake CUDA collectives OK (%s memory, GPU %d)\n", me, allocator.kind, device);
  return 0;
}

// One step of fakeCudaAcross: every tensor at `base` in the fake device
// memory, its values shifted by `s`.
int acrossStep(Client& c, uint8_t* base, int s, bool gather_like = true, bool with_broadcast = true) {
  const int n = c.size(), me = c.rank();
  const std::vector<int64_t> s256 = {256}, s7 = {7};
  auto* sum = reinterpret_cast<float*>(base);
  auto* avg = reinterpret_cast<double*>(base + 4096);
  auto* mx = reinterpret_cast<int32_t*>(base + 8192);
  for (int i = 0; i < 256; ++i) {
    sum[i] = static_cast<float>(me + i + s);
    avg[i] = static_cast<double>(2 * me + s);
    mx[i] = me * 3 + i + s;
  }
  gradsync_op_t ops[3] = {cudaOp(GRADSYNC_ALLREDUCE, "x.sum", sum, GRADSYNC_FLOAT32, s256),
                          cudaOp(GRADSYNC_ALLREDUCE, "x.avg", avg, GRADSYNC_FLOAT64, s256),
                          cudaOp(GRADSYNC_ALLREDUCE, "x.max", mx, GRADSYNC_INT32, s256)};
  ops[1].reduce_op = GRADSYNC_AVERAGE;
  ops[2].reduce_op = GRADSYNC_MAX;
  Operation handles[3];
  for (int k = 0; k < 3; ++k) WORKER_OK(c.start(ops[k], &handles[k]));
  for (auto& h : handles) WORKER_OK(h.wait(60));
  for (int i = 0; i < 256; ++i) {
    WORKER_CHECK(sum[i] == static_cast<float>(n * (n - 1) / 2 + n * (i + s)), "step %d sum %d: %g", s, i, sum[i]);
    WORKER_CHECK(avg[i] == static_cast<double>(n - 1 + s), "step %d average %d: %g", s, i, avg[i]);
    WORKER_CHECK(mx[i] == (n - 1) * 3 + i + s, "step %d max %d: %d", s, i, mx[i]);
  }
  if (!with_broadcast) return 0;
  auto* b = reinterpret_cast<int64_t*>(base + 16384);
  for (int i = 0; i < 7; ++i) b[i] = me * 100 + i + s;
  gradsync_op_t bcast = cudaOp(GRADSYNC_BROADCAST, "x.bcast", b, GRADSYNC_INT64, s7);
  bcast.root_rank = n - 1;  // on another daemon than rank 0
  if (run(c, bcast)) return 1;
  WORKER_CHECK(b[6] == (n - 1) * 100 + 6 + s, "step %d broadcast: %lld", s, static_cast<long long>(b[6]));
  if (!gather_like) return 0;
  // Allgather and reducescatter stage through host memory across daemons.
  auto* g = reinterpret_cast<float*>(base + 32768);
  for (int i = 0; i < 7; ++i) g[i] = static_cast<float>(me * 10 + i + s);
  gradsync_op_t gather = cudaOp(GRADSYNC_ALLGATHER, "x.gather", g, GRADSYNC_FLOAT32, s7);
  auto* gathered = reinterpret_cast<float*>(base + 65536);
  gather.output = gathered;
  gather.output_bytes = static_cast<uint64_t>(n) * 7 * 4;
  if (run(c, gather)) return 1;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 7; ++i) {
      WORKER_CHECK(gathered[r * 7 + i] == static_cast<float>(r * 10 + i + s), "step %d allgather [%d][%d]: %g", s, r, i,
                   gathered[r * 7 + i]);
    }
  }
  auto* rs = reinterpret_cast<float*>(base + 98304);
  for (int i = 0; i < 2 * n; ++i) rs[i] = static_cast<float>(me + i + s);
  const std::vector<int64_t> rows = {2 * n};
  gradsync_op_t scatter = cudaOp(GRADSYNC_REDUCESCATTER, "x.scatter", rs, GRADSYNC_FLOAT32, rows);
  scatter.reduce_op = GRADSYNC_SUM;
  auto* mine = reinterpret_cast<float*>(base + 131072);
  scatter.output = mine;
  scatter.output_bytes = 2 * 4;
  if (run(c, scatter)) return 1;
  for (int k = 0; k < 2; ++k) {
    const float expected = static_cast<float>(n * (n - 1) / 2 + n * (2 * me + k + s));
    WORKER_CHECK(mine[k] == expected, "step %d reducescatter [%d]: %g, expected %g", s, k, mine[k], expected);
  }
  return 0;
}

// Ranks on several daemons: CUDA allreduce (a fused bucket of several
// tensors, every reduction kind), broadcast, allgather and reducescatter
// go between the daemons (the last two staged through host memory). With a
// step count (args[0]), repeated under the same names (cached after the
// first), each step's tensors in the other of two allocations and at
// another offset.
int fakeCudaAcross(Client& c, const std::vector<std::string>& args) {
  FakeMalloc fake_malloc = loadFakeDriver();
  WORKER_CHECK(fake_malloc != nullptr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  uint8_t* allocations[2] = {static_cast<uint8_t*>(fake_malloc(1 << 20)), static_cast<uint8_t*>(fake_malloc(1 << 20))};
  WORKER_CHECK(allocations[0] != nullptr && allocations[1] != nullptr, "fake cudaMalloc failed");
  const int steps = args.empty() ? 1 : std::atoi(args[0].c_str());
  for (int s = 0; s < steps; ++s) {
    if (acrossStep(c, allocations[s % 2] + (s % 3) * 262144, s)) return 1;
  }
  std::fprintf(stderr, "[rank %d] fake CUDA across daemons OK (%d steps)\n", c.rank(), steps);
  return 0;
}

// The last rank dies (SIGKILL) after its GPU is attached and its memory
// exported, while the others wait in a CUDA allreduce: they get the error
// naming it, and the daemon unmaps the dead rank's memory. args: the
// memory, as fakeAllocator's.
int fakeCudaKill(Client& c, const std::vector<std::string>& args) {
  const FakeAllocator allocator = fakeAllocator(c, args);
  WORKER_CHECK(allocator.allocate, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  const int n = c.size(), me = c.rank();
  auto* x = reinterpret_cast<float*>(allocator.allocate(1 << 16));
  const std::vector<int64_t> shape = {1024};
  for (int i = 0; i < 1024; ++i) x[i] = 1.0f;
  if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "k.first", x, GRADSYNC_FLOAT32, shape))) return 1;
  if (me == n - 1) ::raise(SIGKILL);
  Operation pending;
  WORKER_OK(c.start(cudaOp(GRADSYNC_ALLREDUCE, "k.second", x, GRADSYNC_FLOAT32, shape), &pending));
  Result r = pending.wait(20);
  const std::string victim = "rank " + std::to_string(n - 1);
  WORKER_CHECK(r.code == GRADSYNC_ABORTED && r.message.find(victim) != std::string::npos,
               "the CUDA allreduce a dead rank never joined ended with %d: %s", r.code, r.message.c_str());
  std::fprintf(stderr, "[rank %d] named error: %s\n", me, r.message.c_str());
  return 0;
}

// One CUDA allreduce (the job's stream exists now), then the rank stays
// connected ("holding" in its log) until the daemon goes or 60 s pass.
int fakeCudaHold(Client& c, const std::vector<std::string>&) {
  FakeMalloc fake_malloc = loadFakeDriver();
  WORKER_CHECK(fake_malloc != nullptr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  auto* x = static_cast<float*>(fake_malloc(1 << 12));
  const std::vector<int64_t> shape = {16};
  for (int i = 0; i < 16; ++i) x[i] = 1.0f;
  if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "hold", x, GRADSYNC_FLOAT32, shape))) return 1;
  std::fprintf(stderr, "[rank %d] holding\n", c.rank());
  std::fflush(stderr);
  ::sleep(60);
  return 0;
}

// args: GPUS STEPS: this rank's tensors on fake GPU (local rank % GPUS), as
// on a node whose ranks use GPUS GPUs; the steps of fakeCudaAcross and an
// int16 sum each step (a dtype NCCL lacks: combined through host memory).
int fakeCudaGpus(Client& c, const std::vector<std::string>& args) {
  using MallocOn = void* (*)(size_t, int);
  auto malloc_on = reinterpret_cast<MallocOn>(fakeSymbol("gradsync_fake_cuda_malloc_on"));
  WORKER_CHECK(malloc_on != nullptr, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  WORKER_CHECK(args.size() == 2, "fake_cuda_gpus GPUS STEPS");
  const int gpus = std::atoi(args[0].c_str()), steps = std::atoi(args[1].c_str());
  const char* local = std::getenv("GRADSYNC_LOCAL_RANK");
  const int device = (local != nullptr ? std::atoi(local) : c.rank()) % gpus;
  uint8_t* allocations[2] = {static_cast<uint8_t*>(malloc_on(1 << 20, device)),
                             static_cast<uint8_t*>(malloc_on(1 << 20, device))};
  WORKER_CHECK(allocations[0] != nullptr && allocations[1] != nullptr, "fake cudaMalloc failed");
  const int n = c.size(), me = c.rank();
  const std::vector<int64_t> s300 = {300};
  for (int s = 0; s < steps; ++s) {
    if (acrossStep(c, allocations[s % 2] + (s % 3) * 262144, s)) return 1;
    auto* h = reinterpret_cast<int16_t*>(allocations[s % 2] + 786432);
    for (int i = 0; i < 300; ++i) h[i] = static_cast<int16_t>(me + i % 5 + s);
    if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "gpus.int16", h, GRADSYNC_INT16, s300))) return 1;
    for (int i = 0; i < 300; ++i) {
      const int want = n * (n - 1) / 2 + n * (i % 5 + s);
      WORKER_CHECK(h[i] == want, "step %d int16 sum %d: %d, want %d", s, i, h[i], want);
    }
  }
  std::fprintf(stderr, "[rank %d] fake CUDA on GPU %d of %d OK (%d steps)\n", me, device, gpus, steps);
  return 0;
}

// args: FIRST ("alltoall" or "allgather"). Three steps of an alltoall and
// an allgather of CUDA tensors, FIRST first in each (so that it is the
// first NCCL call among the daemons).
int fakeCudaExchange(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 1, "fake_cuda_exchange alltoall|allgather");
  const FakeAllocator allocator = fakeAllocator(c, {});
  WORKER_CHECK(allocator.allocate, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  const int n = c.size(), me = c.rank();
  uint8_t* memory = allocator.allocate(4096);
  WORKER_CHECK(memory != nullptr, "fake cudaMalloc failed");
  auto* send = reinterpret_cast<float*>(memory);
  auto* receive = reinterpret_cast<float*>(memory + 1024);
  auto* mine = reinterpret_cast<float*>(memory + 2048);
  auto* gathered = reinterpret_cast<float*>(memory + 3072);
  const std::vector<int64_t> s_n = {n}, s2 = {1, 2};
  const bool alltoall_first = args[0] == "alltoall";
  for (int step = 0; step < 3; ++step) {
    for (int k = 0; k < 2; ++k) {
      if ((k == 0) == alltoall_first) {
        for (int j = 0; j < n; ++j) send[j] = static_cast<float>(me * 100 + j + step);
        gradsync_op_t a2a = cudaOp(GRADSYNC_ALLTOALL, "exchange.alltoall", send, GRADSYNC_FLOAT32, s_n);
        a2a.output = receive;
        a2a.output_bytes = static_cast<uint64_t>(n) * 4;
        if (run(c, a2a)) return 1;
        for (int r = 0; r < n; ++r) {
          WORKER_CHECK(receive[r] == r * 100 + me + step, "step %d alltoall from %d: %g", step, r, receive[r]);
        }
      } else {
        for (int i = 0; i < 2; ++i) mine[i] = static_cast<float>(me * 10 + i + step);
        gradsync_op_t gather = cudaOp(GRADSYNC_ALLGATHER, "exchange.allgather", mine, GRADSYNC_FLOAT32, s2);
        gather.output = gathered;
        gather.output_bytes = static_cast<uint64_t>(n) * 2 * 4;
        if (run(c, gather)) return 1;
        for (int r = 0; r < n; ++r) {
          WORKER_CHECK(gathered[r * 2 + 1] == r * 10 + 1 + step, "step %d allgather from %d: %g", step, r,
                       gathered[r * 2 + 1]);
        }
      }
    }
  }
  std::fprintf(stderr, "[rank %d] exchanges of CUDA tensors OK\n", me);
  return 0;
}

// args: GPUS. Adasum of CUDA tensors (float32 and float64, on fake GPU
// local rank % GPUS) against the same tensors on the CPU path: equal bit for
// bit, for two steps.
int fakeCudaAdasum(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 1, "fake_cuda_adasum GPUS");
  const FakeAllocator allocator = fakeAllocator(c, {"gpus", args[0]});
  WORKER_CHECK(allocator.allocate, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  constexpr int kCount = 37;
  uint8_t* memory = allocator.allocate(4096);
  WORKER_CHECK(memory != nullptr, "fake cudaMalloc failed");
  const std::vector<int64_t> shape = {kCount};
  for (int step = 0; step < 2; ++step) {
    auto* f = reinterpret_cast<float*>(memory);
    auto* d = reinterpret_cast<double*>(memory + 1024);
    std::vector<float> f_cpu(kCount);
    std::vector<double> d_cpu(kCount);
    for (int i = 0; i < kCount; ++i) {
      f[i] = f_cpu[i] = static_cast<float>(std::sin(c.rank() + 1.0 + i + step));
      d[i] = d_cpu[i] = std::cos(c.rank() * 0.5 + i - step);
    }
    struct Pair {
      const char* name;
      void* cuda;
      void* cpu;
      int dtype;
      size_t bytes;
    };
    for (const Pair& p : {Pair{"adasum.f32", f, f_cpu.data(), GRADSYNC_FLOAT32, sizeof(float) * kCount},
                          Pair{"adasum.f64", d, d_cpu.data(), GRADSYNC_FLOAT64, sizeof(double) * kCount}}) {
      gradsync_op_t on_gpu =
          cudaOp(GRADSYNC_ALLREDUCE, (std::string(p.name) + ".cuda").c_str(), p.cuda, p.dtype, shape);
      on_gpu.reduce_op = GRADSYNC_ADASUM;
      if (run(c, on_gpu)) return 1;
      gradsync_op_t on_cpu = makeOp(GRADSYNC_ALLREDUCE, (std::string(p.name) + ".cpu").c_str(), p.cpu, p.dtype, shape);
      on_cpu.reduce_op = GRADSYNC_ADASUM;
      if (run(c, on_cpu)) return 1;
      WORKER_CHECK(std::memcmp(p.cuda, p.cpu, p.bytes) == 0, "step %d %s: CUDA and CPU Adasum differ", step, p.name);
    }
  }
  std::fprintf(stderr, "[rank %d] Adasum of CUDA tensors OK\n", c.rank());
  return 0;
}

// Two nodes of 2 fake GPUs, ranks 0, 1 on the first and 2, 3 on the
// second (local rank = GPU). A CUDA allreduce of process set {1, 3} first,
// so that the daemons' NCCL communicator forms on GPU 1, then every
// collective of the whole job, whose ranks use GPUs 0 and 1: GPU 1 must
// lead among the nodes.
int fakeCudaLead(Client& c, const std::vector<std::string>&) {
  WORKER_CHECK(c.size() == 4, "fake_cuda_lead needs 4 ranks, not %d", c.size());
  const FakeAllocator allocator = fakeAllocator(c, {"gpus", "2"});
  WORKER_CHECK(allocator.allocate, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  int32_t odd = -1;
  WORKER_OK(c.addProcessSet({1, 3}, &odd, 30));
  if (c.rank() % 2 == 1) {
    auto* x = reinterpret_cast<float*>(allocator.allocate(256));
    WORKER_CHECK(x != nullptr, "fake cudaMalloc failed");
    for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(c.rank() + i);
    const std::vector<int64_t> s64 = {64};
    gradsync_op_t in_set = cudaOp(GRADSYNC_ALLREDUCE, "lead.odd", x, GRADSYNC_FLOAT32, s64);
    in_set.process_set = odd;
    if (run(c, in_set)) return 1;
    WORKER_CHECK(x[5] == static_cast<float>(1 + 3 + 2 * 5), "the set's sum: %g", x[5]);
  }
  return fakeCuda(c, {"gpus", "2"});
}

// Four ranks on fake GPUs (local rank % GPUS) with process sets {0, 1} and
// {2, 3} added at run time; each of STEPS steps alternates collectives of
// the whole job and of each rank's set (allreduce, broadcast, allgather),
// so the daemon combines GPUs 0-3, then 0-1 and 2-3, again and again.
int fakeCudaSets(Client& c, const std::vector<std::string>& args) {
  WORKER_CHECK(args.size() == 2, "fake_cuda_sets GPUS STEPS");
  WORKER_CHECK(c.size() == 4, "fake_cuda_sets needs 4 ranks, not %d", c.size());
  const FakeAllocator allocator = fakeAllocator(c, {"gpus", args[0]});
  WORKER_CHECK(allocator.allocate, "no fake CUDA driver ($GRADSYNC_TEST_FAKE_LIBCUDA)");
  const int steps = std::atoi(args[1].c_str()), me = c.rank();
  int32_t low = -1, high = -1;
  WORKER_OK(c.addProcessSet({0, 1}, &low, 30));
  WORKER_OK(c.addProcessSet({2, 3}, &high, 30));
  const int32_t mine = me < 2 ? low : high;
  const int base = me < 2 ? 0 : 2;  // the first rank of this rank's set
  // A name belongs to one set at a time (as in Horovod): each set its own.
  const std::string tag = me < 2 ? ".low" : ".high";
  const std::string mine_name = "sets.mine" + tag, bcast_name = "sets.bcast" + tag, gather_name = "sets.gather" + tag;
  uint8_t* memory = allocator.allocate(1 << 16);
  WORKER_CHECK(memory != nullptr, "fake cudaMalloc failed");
  auto* x = reinterpret_cast<float*>(memory);
  auto* b = reinterpret_cast<int32_t*>(memory + 8192);
  auto* g = reinterpret_cast<float*>(memory + 16384);
  auto* gathered = reinterpret_cast<float*>(memory + 24576);
  const std::vector<int64_t> s64 = {64}, s5 = {5};
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(me + i + s);
    if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "sets.all", x, GRADSYNC_FLOAT32, s64))) return 1;
    WORKER_CHECK(x[3] == static_cast<float>(6 + 4 * (3 + s)), "step %d, the job's sum: %g", s, x[3]);
    for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(me + i + s);
    gradsync_op_t in_set = cudaOp(GRADSYNC_ALLREDUCE, mine_name.c_str(), x, GRADSYNC_FLOAT32, s64);
    in_set.process_set = mine;
    if (run(c, in_set)) return 1;
    WORKER_CHECK(x[3] == static_cast<float>(2 * base + 1 + 2 * (3 + s)), "step %d, the set's sum: %g", s, x[3]);
    for (int i = 0; i < 5; ++i) b[i] = me * 100 + i + s;
    gradsync_op_t bcast = cudaOp(GRADSYNC_BROADCAST, bcast_name.c_str(), b, GRADSYNC_INT32, s5);
    bcast.process_set = mine;
    bcast.root_rank = base + 1;
    if (run(c, bcast)) return 1;
    WORKER_CHECK(b[4] == (base + 1) * 100 + 4 + s, "step %d, the set's broadcast: %d", s, b[4]);
    for (int i = 0; i < 5; ++i) g[i] = static_cast<float>(me * 10 + i + s);
    gradsync_op_t gather = cudaOp(GRADSYNC_ALLGATHER, gather_name.c_str(), g, GRADSYNC_FLOAT32, s5);
    gather.process_set = mine;
    gather.output = gathered;
    gather.output_bytes = 2 * 5 * 4;
    if (run(c, gather)) return 1;
    for (int r = 0; r < 2; ++r) {
      WORKER_CHECK(gathered[r * 5 + 2] == static_cast<float>((base + r) * 10 + 2 + s), "step %d, gathered from %d: %g",
                   s, base + r, gathered[r * 5 + 2]);
    }
  }
  // A rank that leaves fails the job: none goes before every set is done.
  const std::vector<int64_t> s1 = {1};
  if (run(c, cudaOp(GRADSYNC_ALLREDUCE, "sets.end", x, GRADSYNC_FLOAT32, s1))) return 1;
  std::fprintf(stderr, "[rank %d] process sets over fake GPUs OK (%d steps)\n", me, steps);
  return 0;
}

}  // namespace gradsync::worker
