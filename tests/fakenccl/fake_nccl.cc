// SPDX-License-Identifier: Apache-2.0
// A stand-in for libnccl.so.2 (loaded through GRADSYNC_NCCL_LIBRARY) for
// tests on machines without a GPU: the NCCL calls gradsyncd makes, over host
// memory (the fake GPUs of tests/fakegpu), across threads and processes.
//
// A communicator is a file shared by its ranks (named by the unique id, in
// $TEST_TMPDIR or /tmp), mapped by each: a header, one slot per rank (a
// sequence number posted and one done) and one data area per rank. A
// collective posts this rank's contribution, waits until every rank posted
// the same sequence, computes its own result from all areas with the CPU
// kernels, and marks it done; the next one waits until every rank is done
// with the last before overwriting its area. A call (or, between
// ncclGroupStart and ncclGroupEnd, the group: the k-th call of each
// communicator together, so that one process may hold several ranks) runs
// on a thread of its own, as NCCL's kernels run on their stream: the call
// returns at once, and ncclCommGetAsyncError says ncclInProgress until it
// ends (the stream is ignored). The next call on a communicator waits for
// the last. Every wait is bounded; an injected failure marks the
// communicator failed, which every rank's wait sees at once; an abort ends
// the waits on that rank (and its own), and waits for its call in flight
// to end, as a destroy does.
//
// Environment: GRADSYNC_FAKE_NCCL_FAIL_AT=N fails this process's N-th
// collective (an asynchronous error, as NCCL reports a network failure);
// GRADSYNC_FAKE_NCCL_STALL_AT=N stalls it (as a kernel whose peer never
// comes) until the communicator is aborted or the limit passes;
// GRADSYNC_FAKE_NCCL_FAIL_SPLIT=1 fails this process's first ncclCommSplit
// (asynchronously, on the parent);
// GRADSYNC_FAKE_NCCL_TIMEOUT_MS bounds each wait (default 30000);
// GRADSYNC_FAKE_NCCL_SLOT_BYTES is the most one rank contributes to one
// call (default 16 MiB); GRADSYNC_FAKE_NCCL_VERBOSE prints a line on stderr
// for each rank initialized, and at 2 also for each call. ncclSend and ncclRecv go through a mailbox per
// ordered pair of ranks: the sends of a group to one peer are one message,
// posted when the peer took the last one; its receives from that peer must
// add up to it. ncclCommSplit gathers every rank's color and key over the
// parent (a collective of its own, run at once: one rank of the parent per
// thread) and opens the file of the new communicator, named after the
// parent's, the split's number and the color.
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/collective/reduce/cpu_reduce.h"

// A call or group running on its thread.
struct FakeNcclLaunch {
  std::atomic<bool> done{false};
};

struct ncclComm {
  std::string path;
  int nranks = 0;
  int rank = 0;
  uint8_t* region = nullptr;
  size_t region_bytes = 0;
  uint64_t seq = 0;
  std::atomic<ncclResult_t> error{ncclSuccess};
  std::string last_error;  // written before `error`
  bool detached = false;
  std::vector<uint64_t> sent, received;  // messages, by peer
  uint64_t splits = 0;
  std::shared_ptr<FakeNcclLaunch> running;  // the last call issued (the issuing thread's)
};

namespace {

using gradsync::DataType;
using gradsync::ReduceOp;
namespace v1 = gradsync::v1;

constexpr char kMagic[8] = {'F', 'A', 'K', 'E', 'N', 'C', 'C', 'L'};
constexpr size_t kHeaderBytes = 64;
constexpr size_t kSlotBytes = 64;

struct Header {
  char magic[8];
  std::atomic<uint32_t> failed;
  std::atomic<uint32_t> detached;
};
struct Slot {
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> done;
  uint64_t bytes;
  std::atomic<uint32_t> aborted;  // a rank's slot: it aborted
};
static_assert(sizeof(Header) <= kHeaderBytes && sizeof(Slot) <= kSlotBytes, "layout");

size_t envNumber(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

size_t areaBytes() { return envNumber("GRADSYNC_FAKE_NCCL_SLOT_BYTES", size_t{16} << 20); }

Header* header(ncclComm* c) { return reinterpret_cast<Header*>(c->region); }
Slot* slot(ncclComm* c, int rank) { return reinterpret_cast<Slot*>(c->region + kHeaderBytes + kSlotBytes * rank); }
uint8_t* area(ncclComm* c, int rank) {
  return c->region + kHeaderBytes + kSlotBytes * c->nranks + areaBytes() * static_cast<size_t>(rank);
}
// The mailbox from rank `from` to rank `to`: a slot (posted: messages
// posted; done: taken), then the message.
size_t mailboxBytes() { return kSlotBytes + areaBytes(); }
size_t regionBytes(int nranks) {
  const auto n = static_cast<size_t>(nranks);
  return kHeaderBytes + kSlotBytes * n + areaBytes() * n + mailboxBytes() * n * n;
}
Slot* mailbox(ncclComm* c, int from, int to) {
  const auto n = static_cast<size_t>(c->nranks);
  uint8_t* at = c->region + kHeaderBytes + kSlotBytes * n + areaBytes() * n +
                mailboxBytes() * (static_cast<size_t>(from) * n + static_cast<size_t>(to));
  return reinterpret_cast<Slot*>(at);
}
uint8_t* message(Slot* box) { return reinterpret_cast<uint8_t*>(box) + kSlotBytes; }

bool typeOf(ncclDataType_t type, DataType* out, size_t* size) {
  switch (type) {
    case ncclInt8:
      *out = v1::INT8, *size = 1;
      return true;
    case ncclUint8:
      *out = v1::UINT8, *size = 1;
      return true;
    case ncclInt32:
      *out = v1::INT32, *size = 4;
      return true;
    case ncclInt64:
      *out = v1::INT64, *size = 8;
      return true;
    case ncclFloat16:
      *out = v1::FLOAT16, *size = 2;
      return true;
    case ncclBfloat16:
      *out = v1::BFLOAT16, *size = 2;
      return true;
    case ncclFloat32:
      *out = v1::FLOAT32, *size = 4;
      return true;
    case ncclFloat64:
      *out = v1::FLOAT64, *size = 8;
      return true;
    default:
      return false;
  }
}

bool opOf(ncclRedOp_t op, ReduceOp* out) {
  switch (op) {
    case ncclSum:
      *out = v1::SUM;
      return true;
    case ncclProd:
      *out = v1::PRODUCT;
      return true;
    case ncclMax:
      *out = v1::MAX;
      return true;
    case ncclMin:
      *out = v1::MIN;
      return true;
    case ncclAvg:
      *out = v1::AVERAGE;
      return true;
    default:
      return false;
  }
}

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kSend, kRecv, kExchange };

// A message of an exchange: `bytes` from `send` or into `recv`, with `peer`.
struct Part {
  const void* send;
  void* recv;
  size_t bytes;
  int peer;
};

// One collective call of one rank.
struct Call {
  Kind kind;
  ncclComm* comm;
  const void* send;
  void* recv;
  size_t count;  // elements: of the whole buffer; allgather: sent; reducescatter: received
  DataType dtype;
  size_t esize;
  ReduceOp op;
  int root;
  std::vector<Part> sends = {}, recvs = {};  // kExchange
  int stall = 0;                             // GRADSYNC_FAKE_NCCL_STALL_AT's call number, or 0
};

ncclResult_t fail(ncclComm* c, ncclResult_t error, const std::string& why) {
  c->last_error = why;
  c->error = error;
  header(c)->failed.store(1);
  return error;
}

// Whether a wait of `c` on rank `peer` (-1: on every rank) cannot end: a
// rank failed, this rank or the one waited on aborted (as with NCCL, a rank
// that aborts fails the calls that wait on it, not those of other ranks).
bool doomed(ncclComm* c, int peer) {
  if (header(c)->failed.load() != 0 || slot(c, c->rank)->aborted.load() != 0) return true;
  for (int r = peer < 0 ? 0 : peer; r < (peer < 0 ? c->nranks : peer + 1); ++r) {
    if (slot(c, r)->aborted.load() != 0) return true;
  }
  return false;
}

// Waits until `reached()` (on rank `peer`; -1: every rank): false once it
// is doomed and still not reached (what a rank did before it failed still
// counts: a rank that leaves after the last call does not fail the others'
// reading of it) or past the limit.
bool waitUntil(ncclComm* c, const std::function<bool()>& reached, const std::string& what, int peer = -1) {
  const auto limit = std::chrono::milliseconds(envNumber("GRADSYNC_FAKE_NCCL_TIMEOUT_MS", 30000));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (int spins = 0; !reached(); ++spins) {
    if (doomed(c, peer) && !reached()) {
      if (c->error == ncclSuccess) {
        c->last_error = "fake NCCL: another rank failed or aborted (" + what + ")";
        c->error = ncclRemoteError;
      }
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      fail(c, ncclSystemError, "fake NCCL: " + what + " waited past its limit");
      return false;
    }
    if (spins < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  return true;
}

// Waits until every rank's counter (posted or done) reaches `seq`.
bool waitAll(ncclComm* c, uint64_t seq, bool posted, const char* what) {
  return waitUntil(
      c,
      [&] {
        for (int r = 0; r < c->nranks; ++r) {
          if ((posted ? slot(c, r)->posted.load() : slot(c, r)->done.load()) < seq) return false;
        }
        return true;
      },
      what);
}

// Waits until `counter` (of a mailbox with `peer`) reaches `value`.
bool waitFor(ncclComm* c, const std::atomic<uint64_t>& counter, uint64_t value, const std::string& what, int peer) {
  return waitUntil(
      c, [&] { return counter.load() >= value; }, what, peer);
}

// An exchange's sends: one message to each peer with any, once the peer
// took the last one.
bool postSends(Call& k) {
  ncclComm* c = k.comm;
  if (c->error != ncclSuccess) return false;
  for (int peer = 0; peer < c->nranks; ++peer) {
    size_t bytes = 0;
    for (const Part& part : k.sends) bytes += part.peer == peer ? part.bytes : 0;
    if (bytes == 0) continue;
    if (bytes > areaBytes()) {
      fail(c, ncclInvalidArgument,
           "fake NCCL: " + std::to_string(bytes) + " bytes in one message (GRADSYNC_FAKE_NCCL_SLOT_BYTES)");
      return false;
    }
    Slot* box = mailbox(c, c->rank, peer);
    if (!waitFor(c, box->done, c->sent[peer], "a send waiting for rank " + std::to_string(peer) + " to take the last",
                 peer)) {
      return false;
    }
    uint8_t* at = message(box);
    for (const Part& part : k.sends) {
      if (part.peer != peer) continue;
      std::memcpy(at, part.send, part.bytes);
      at += part.bytes;
    }
    box->bytes = bytes;
    box->posted.store(++c->sent[peer]);
  }
  return true;
}

// An exchange's receives: each peer's message, which must be as long as the
// receives from it.
bool takeReceives(Call& k) {
  ncclComm* c = k.comm;
  if (c->error != ncclSuccess) return false;
  for (int peer = 0; peer < c->nranks; ++peer) {
    size_t bytes = 0;
    for (const Part& part : k.recvs) bytes += part.peer == peer ? part.bytes : 0;
    if (bytes == 0) continue;
    Slot* box = mailbox(c, peer, c->rank);
    const uint64_t expected = c->received[peer] + 1;
    if (!waitFor(c, box->posted, expected, "a receive waiting for rank " + std::to_string(peer), peer)) return false;
    if (box->bytes != bytes) {
      fail(c, ncclInvalidUsage,
           "fake NCCL: rank " + std::to_string(c->rank) + " receives " + std::to_string(bytes) + " bytes from rank " +
               std::to_string(peer) + ", which sent " + std::to_string(box->bytes));
      return false;
    }
    const uint8_t* from = message(box);
    for (const Part& part : k.recvs) {
      if (part.peer != peer) continue;
      std::memcpy(part.recv, from, part.bytes);
      from += part.bytes;
    }
    box->done.store(c->received[peer] = expected);
  }
  return true;
}

size_t contribution(const Call& k) {
  switch (k.kind) {
    case Kind::kBroadcast:
      return k.comm->rank == k.root ? k.count * k.esize : 0;
    case Kind::kAllGather:
      return k.count * k.esize;
    case Kind::kReduceScatter:
      return k.count * k.esize * static_cast<size_t>(k.comm->nranks);
    default:
      return k.count * k.esize;
  }
}

// Phase 1: this rank's contribution into its area.
bool post(Call& k) {
  if (k.kind == Kind::kExchange) return postSends(k);
  ncclComm* c = k.comm;
  if (c->error != ncclSuccess) return false;
  const uint64_t seq = ++c->seq;
  if (!waitAll(c, seq - 1, /*posted=*/false, "waiting for the last call's readers")) return false;
  const size_t bytes = contribution(k);
  if (bytes > areaBytes()) {
    fail(c, ncclInvalidArgument,
         "fake NCCL: " + std::to_string(bytes) + " bytes in one call (GRADSYNC_FAKE_NCCL_SLOT_BYTES)");
    return false;
  }
  if (bytes > 0) {
    std::memcpy(area(c, c->rank), k.send, bytes);
  }
  slot(c, c->rank)->bytes = bytes;
  slot(c, c->rank)->posted.store(seq);
  return true;
}

// Phase 2: this rank's result from every area.
bool complete(Call& k) {
  if (k.kind == Kind::kExchange) return takeReceives(k);
  ncclComm* c = k.comm;
  if (c->error != ncclSuccess) return false;
  const uint64_t seq = c->seq;
  if (!waitAll(c, seq, /*posted=*/true, "waiting for every rank's contribution")) return false;
  std::vector<const void*> inputs;
  const size_t offset = k.kind == Kind::kReduceScatter ? k.count * k.esize * static_cast<size_t>(c->rank) : 0;
  for (int r = 0; r < c->nranks; ++r) inputs.push_back(area(c, r) + offset);
  switch (k.kind) {
    case Kind::kBroadcast:
      std::memcpy(k.recv, area(c, k.root), k.count * k.esize);
      break;
    case Kind::kAllGather:
      for (int r = 0; r < c->nranks; ++r) {
        std::memcpy(static_cast<uint8_t*>(k.recv) + k.count * k.esize * r, area(c, r), k.count * k.esize);
      }
      break;
    default: {
      void* outputs[1] = {k.recv};
      gradsync::reduce::ReduceArgs args;
      args.dtype = k.dtype;
      args.op = k.op;
      args.inputs = inputs.data();
      args.num_inputs = c->nranks;
      args.outputs = outputs;
      args.num_outputs = 1;
      args.average_divisor = c->nranks;
      if (!gradsync::reduce::validateReduceArgs(args).isOk()) {
        fail(c, ncclInvalidArgument, "fake NCCL: a reduction the CPU kernels refuse");
        return false;
      }
      gradsync::reduce::reduceRange(args, 0, k.count);
    }
  }
  slot(c, c->rank)->done.store(seq);
  return true;
}

std::mutex g_mutex;
int g_calls = 0;   // collectives of this process, for GRADSYNC_FAKE_NCCL_FAIL_AT
int g_splits = 0;  // splits of this process, for GRADSYNC_FAKE_NCCL_FAIL_SPLIT
thread_local int t_group_depth = 0;
thread_local std::vector<Call> t_group;

// The sends and receives of each communicator in a group as one exchange,
// where the first of them was.
std::vector<Call> mergeExchanges(std::vector<Call>& calls) {
  std::vector<Call> merged;
  std::map<ncclComm*, size_t> exchange;  // its index in `merged`
  for (auto& k : calls) {
    if (k.kind != Kind::kSend && k.kind != Kind::kRecv) {
      merged.push_back(std::move(k));
      continue;
    }
    auto [it, added] = exchange.emplace(k.comm, merged.size());
    if (added) merged.push_back(Call{Kind::kExchange, k.comm, nullptr, nullptr, 0, v1::UINT8, 1, v1::SUM, 0});
    Call& into = merged[it->second];
    (k.kind == Kind::kSend ? into.sends : into.recvs).push_back({k.send, k.recv, k.count, k.root});
  }
  return merged;
}

const char* kindName(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce:
      return "allreduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllGather:
      return "allgather";
    case Kind::kReduceScatter:
      return "reducescatter";
    default:
      return "send/receive";
  }
}

// The calls of a group, the k-th call of each communicator together.
void runGroup(std::vector<Call>& group) {
  std::vector<Call> calls = mergeExchanges(group);
  if (envNumber("GRADSYNC_FAKE_NCCL_VERBOSE", 0) >= 2) {
    for (const auto& k : calls) {
      std::fprintf(stderr, "fake NCCL: rank %d of %d: %s\n", k.comm->rank, k.comm->nranks, kindName(k.kind));
    }
  }
  for (const auto& k : calls) {
    if (k.stall == 0) continue;
    std::fprintf(stderr, "fake NCCL: rank %d of %d: call %d stalls until aborted\n", k.comm->rank, k.comm->nranks,
                 k.stall);
    waitUntil(
        k.comm, [] { return false; }, "a stalled call (GRADSYNC_FAKE_NCCL_STALL_AT)");
    return;
  }
  std::map<ncclComm*, int> seen;
  std::vector<std::vector<Call*>> waves;
  for (auto& k : calls) {
    const int wave = seen[k.comm]++;
    if (waves.size() <= static_cast<size_t>(wave)) waves.resize(wave + 1);
    waves[wave].push_back(&k);
  }
  for (auto& wave : waves) {
    for (Call* k : wave) post(*k);
    for (Call* k : wave) complete(*k);
  }
}

// Waits until the call in flight on `c` (if any) ended: bounded, as its
// waits are.
void settle(ncclComm* c) {
  while (c->running != nullptr && !c->running->done.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Runs `calls` on a thread of their own, once those in flight on their
// communicators ended.
void launch(std::vector<Call> calls) {
  if (calls.empty()) return;
  for (const auto& k : calls) settle(k.comm);
  auto started = std::make_shared<FakeNcclLaunch>();
  for (const auto& k : calls) k.comm->running = started;
  std::thread([calls = std::move(calls), started]() mutable {
    runGroup(calls);
    started->done.store(true);
  }).detach();
}

ncclResult_t issue(Call call) {
  ncclComm* c = call.comm;
  if (c == nullptr) return ncclInvalidArgument;
  if (c->detached) return ncclInvalidUsage;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const int number = ++g_calls;
    if (envNumber("GRADSYNC_FAKE_NCCL_FAIL_AT", 0) == static_cast<size_t>(number)) {
      fail(c, ncclSystemError, "fake NCCL: injected failure of call " + std::to_string(number));
      return ncclSuccess;  // asynchronous, as a network error is
    }
    if (envNumber("GRADSYNC_FAKE_NCCL_STALL_AT", 0) == static_cast<size_t>(number)) call.stall = number;
  }
  if (t_group_depth > 0) {
    t_group.push_back(std::move(call));
    return ncclSuccess;
  }
  std::vector<Call> one;
  one.push_back(std::move(call));
  launch(std::move(one));
  return ncclSuccess;  // errors are asynchronous: ncclCommGetAsyncError
}

ncclResult_t reduction(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                       ncclComm_t comm) {
  Call k{kind, comm, send, recv, count, v1::DATA_TYPE_UNSPECIFIED, 0, v1::SUM, 0};
  if (!typeOf(type, &k.dtype, &k.esize) || !opOf(op, &k.op)) return ncclInvalidArgument;
  return issue(k);
}

void detach(ncclComm* c) {
  if (c->detached) return;
  c->detached = true;
  if (header(c)->detached.fetch_add(1) + 1 == static_cast<uint32_t>(c->nranks)) ::unlink(c->path.c_str());
  ::munmap(c->region, c->region_bytes);
  c->region = nullptr;
}

// Maps the communicator file at `path` (created by the first rank there)
// as rank `rank` of `nranks`.
ncclResult_t openComm(const std::string& path, int nranks, int rank, ncclComm_t* out) {
  auto comm = std::make_unique<ncclComm>();
  comm->path = path;
  comm->nranks = nranks;
  comm->rank = rank;
  comm->region_bytes = regionBytes(nranks);
  comm->sent.assign(nranks, 0);
  comm->received.assign(nranks, 0);
  const int fd = ::open(comm->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ncclSystemError;
  // Every rank sizes the file alike (sparse: pages come on first touch).
  const bool sized = ::ftruncate(fd, static_cast<off_t>(comm->region_bytes)) == 0;
  void* region = sized ? ::mmap(nullptr, comm->region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (region == MAP_FAILED) return ncclSystemError;
  comm->region = static_cast<uint8_t*>(region);
  std::memcpy(header(comm.get())->magic, kMagic, sizeof(kMagic));
  if (std::getenv("GRADSYNC_FAKE_NCCL_VERBOSE") != nullptr) {
    std::fprintf(stderr, "fake NCCL: rank %d of %d initialized (%s)\n", rank, nranks,
                 path.substr(path.rfind('/') + 1).c_str());
  }
  *out = comm.release();
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 23007;  // as the NCCL that lets several ranks share a GPU
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kMagic, sizeof(kMagic));
  unsigned char random[16];
  if (::getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) return ncclSystemError;
  std::memcpy(id->internal + sizeof(kMagic), random, sizeof(random));
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclSystemError:
      return "unhandled system error (fake NCCL)";
    case ncclInvalidArgument:
      return "invalid argument (fake NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (fake NCCL)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (fake NCCL)";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result (fake NCCL)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return comm != nullptr ? comm->last_error.c_str() : ""; }

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t*) {
  if (std::memcmp(id.internal, kMagic, sizeof(kMagic)) != 0 || nranks < 1 || rank < 0 || rank >= nranks) {
    return ncclInvalidArgument;
  }
  static const char hex[] = "0123456789abcdef";
  std::string name = "gradsync-fakenccl-";
  for (size_t i = sizeof(kMagic); i < sizeof(kMagic) + 16; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  const char* dir = std::getenv("TEST_TMPDIR");
  return openComm(std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/" + name, nranks, rank, out);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* out, ncclConfig_t*) {
  if (comm == nullptr || out == nullptr || comm->detached) return ncclInvalidArgument;
  *out = nullptr;
  settle(comm);  // the split runs here, after the parent's calls
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (envNumber("GRADSYNC_FAKE_NCCL_FAIL_SPLIT", 0) != 0 && g_splits++ == 0) {
      fail(comm, ncclSystemError, "fake NCCL: injected failure of ncclCommSplit");
      return ncclSuccess;  // asynchronous: the parent reports it
    }
  }
  // Every rank's (color, key) through an allgather of the parent.
  std::vector<int32_t> mine = {color, key}, all(2 * static_cast<size_t>(comm->nranks));
  std::vector<Call> gather = {Call{Kind::kAllGather, comm, mine.data(), all.data(), 2, v1::INT32, 4, v1::SUM, 0}};
  runGroup(gather);
  if (comm->error != ncclSuccess) return ncclSuccess;  // asynchronous, as the parent's other errors
  const uint64_t split = ++comm->splits;
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  int nranks = 0, rank = 0;
  for (int r = 0; r < comm->nranks; ++r) {
    if (all[2 * r] != color) continue;
    ++nranks;
    const int other_key = all[2 * r + 1];
    if (other_key < key || (other_key == key && r < comm->rank)) ++rank;
  }
  return openComm(comm->path + "-s" + std::to_string(split) + "-c" + std::to_string(color), nranks, rank, out);
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr) return ncclInvalidArgument;
  *state = comm->error;
  if (*state == ncclSuccess && comm->running != nullptr && !comm->running->done.load()) *state = ncclInProgress;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  // The waits on this rank end now, and its own.
  if (comm->region != nullptr) slot(comm, comm->rank)->aborted.store(1);
  settle(comm);
  detach(comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  settle(comm);
  detach(comm);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Call> calls;
  calls.swap(t_group);
  launch(std::move(calls));
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  return reduction(Kind::kAllReduce, send, recv, count, type, op, comm);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t) {
  return reduction(Kind::kReduceScatter, send, recv, count, type, op, comm);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t) {
  Call k{Kind::kBroadcast, comm, send, recv, count, v1::DATA_TYPE_UNSPECIFIED, 0, v1::SUM, root};
  if (comm == nullptr || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  if (type == ncclUint8 || type == ncclInt8) {
    k.esize = 1;
  } else if (!typeOf(type, &k.dtype, &k.esize)) {
    return ncclInvalidArgument;
  }
  return issue(k);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
  Call k{Kind::kAllGather, comm, send, recv, count, v1::DATA_TYPE_UNSPECIFIED, 0, v1::SUM, 0};
  if (!typeOf(type, &k.dtype, &k.esize)) return ncclInvalidArgument;
  return issue(k);
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  Call k{Kind::kSend, comm, send, nullptr, 0, v1::DATA_TYPE_UNSPECIFIED, 0, v1::SUM, peer};
  if (comm == nullptr || peer < 0 || peer >= comm->nranks || peer == comm->rank) return ncclInvalidArgument;
  if (!typeOf(type, &k.dtype, &k.esize)) return ncclInvalidArgument;
  k.count = count * k.esize;  // bytes, as a Part holds them
  return issue(k);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  Call k{Kind::kRecv, comm, nullptr, recv, 0, v1::DATA_TYPE_UNSPECIFIED, 0, v1::SUM, peer};
  if (comm == nullptr || peer < 0 || peer >= comm->nranks || peer == comm->rank) return ncclInvalidArgument;
  if (!typeOf(type, &k.dtype, &k.esize)) return ncclInvalidArgument;
  k.count = count * k.esize;
  return issue(k);
}

}  // extern "C"
