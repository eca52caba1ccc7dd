// SPDX-License-Identifier: Apache-2.0
#include "client/src/cuda/cuda_session.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace gradsync::client {
namespace {

using ::testing::HasSubstr;

constexpr const char* kGpu = "GPU-11111111-2222-3333-4444-555555555555";

// Allocations of the fake process: [base, base + size) with a buffer id.
// Not legacy: cuMem memory mapped in chunks of `chunk` bytes, exportable by
// file descriptor or not; or memory of a cudaMallocAsync pool (`pool`).
struct FakeAllocation {
  uint64_t base;
  uint64_t size;
  uint64_t id;
  bool legacy = true;
  std::string uuid = kGpu;
  uint64_t chunk = 0x100;
  bool exportable = true;
  bool pool = false;
};

class FakeDriver : public CudaDriver {
 public:
  FakeDriver(std::vector<FakeAllocation>* allocations, std::map<uint64_t, uint64_t>* remapped,
             std::vector<std::string>* log)
      : allocations_(allocations), remapped_(remapped), log_(log) {}
  StatusOr<PointerInfo> pointerInfo(const void* pointer) override {
    const auto p = reinterpret_cast<uint64_t>(pointer);
    PointerInfo info;
    for (const auto& a : *allocations_) {
      if (p >= a.base && p < a.base + a.size) {
        info.device_memory = true;
        info.buffer_id = a.id;
        info.base = a.base;
        info.size = a.size;
        info.legacy_ipc = a.legacy;
        info.pool = a.pool;
        info.device_uuid = a.uuid;
      }
    }
    return info;
  }
  StatusOr<MemoryChunk> chunkAt(uint64_t address) override {
    const FakeAllocation* a = find(address);
    if (a == nullptr || a->legacy) return internalError("cuPointerGetAttributes failed");
    const uint64_t base = a->base + (address - a->base) / a->chunk * a->chunk;
    auto moved = remapped_->find(base);  // another physical allocation mapped there since
    return MemoryChunk{base, a->chunk, moved != remapped_->end() ? moved->second : a->id * 1000 + base};
  }
  StatusOr<UniqueFd> exportChunk(void*, uint64_t address) override {
    const FakeAllocation* a = find(address);
    if (a == nullptr || !a->exportable) return failedPrecondition("cuMemRetainAllocationHandle failed");
    log_->push_back("export chunk " + std::to_string(address));
    return UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  StatusOr<std::string> exportMemory(void*, uint64_t base) override {
    log_->push_back("export " + std::to_string(base));
    return std::string(64, 'm');
  }
  StatusOr<void*> createIpcEvent(void*, std::string* handle) override {
    *handle = std::string(64, 'r');
    return reinterpret_cast<void*>(++events_);
  }
  StatusOr<void*> openIpcEvent(void*, const std::string& handle) override {
    return reinterpret_cast<void*>(1000 + ++events_);
  }
  Status recordEvent(void*, void* event, void* stream) override {
    log_->push_back("record " + std::to_string(reinterpret_cast<uint64_t>(event)) + " on " +
                    std::to_string(reinterpret_cast<uint64_t>(stream)));
    return okStatus();
  }
  Status streamWaitEvent(void*, void* stream, void* event) override {
    log_->push_back("wait " + std::to_string(reinterpret_cast<uint64_t>(stream)) + " for " +
                    std::to_string(reinterpret_cast<uint64_t>(event)));
    return okStatus();
  }
  void destroyEvent(void*, void*) override { ++destroyed; }
  StatusOr<void*> createEvent(void*) override { return reinterpret_cast<void*>(2000 + ++events_); }
  // Staging buffers at 0x1000000, 0x2000000, ...
  StatusOr<uint64_t> allocate(void*, uint64_t bytes) override {
    const uint64_t base = 0x1000000 * ++allocated_;
    allocations_->push_back({base, bytes, 100 + allocated_});
    log_->push_back("alloc " + std::to_string(base));
    return base;
  }
  void freeMemory(void*, uint64_t address) override {
    log_->push_back("free " + std::to_string(address));
    allocations_->erase(std::remove_if(allocations_->begin(), allocations_->end(),
                                       [&](const FakeAllocation& a) { return a.base == address; }),
                        allocations_->end());
  }
  Status copy(void*, uint64_t dst, uint64_t src, uint64_t bytes, void* stream) override {
    log_->push_back("copy " + std::to_string(dst) + " <- " + std::to_string(src) + " " + std::to_string(bytes) +
                    " on " + std::to_string(reinterpret_cast<uint64_t>(stream)));
    return okStatus();
  }
  StatusOr<bool> eventDone(void*, void*) override { return !pending; }
  bool pending = false;  // no event's work has finished
  int destroyed = 0;

 private:
  const FakeAllocation* find(uint64_t p) const {
    for (const auto& a : *allocations_) {
      if (p >= a.base && p < a.base + a.size) return &a;
    }
    return nullptr;
  }
  std::vector<FakeAllocation>* allocations_;
  std::map<uint64_t, uint64_t>* remapped_;
  std::vector<std::string>* log_;
  uint64_t events_ = 0;
  uint64_t allocated_ = 0;
};

class CudaSessionTest : public ::testing::Test {
 protected:
  std::unique_ptr<CudaSession> makeSession(std::vector<std::string> daemon_gpus = {kGpu}) {
    CudaSessionOptions options;
    options.daemon_gpus = std::move(daemon_gpus);
    options.daemon_name = "gradsyncd at /tmp/s";
    options.event_slots = 2;
    options.max_cached_buffers = 2;
    auto loader = [this]() -> StatusOr<std::unique_ptr<CudaDriver>> {
      ++driver_loads_;
      if (!driver_available_) return failedPrecondition("no CUDA driver is loaded in this process");
      auto driver = std::make_unique<FakeDriver>(&allocations_, &remapped_, &log_);
      driver_ = driver.get();
      return std::unique_ptr<CudaDriver>(std::move(driver));
    };
    auto channel = [this](const v1::HandoffRequest& request, v1::HandoffResponse* response,
                          const std::vector<int>& fds) {
      requests_.push_back(request);
      fds_sent_.push_back(fds.size());
      if (request.has_cuda_attach()) {
        for (int i = 0; i < request.cuda_attach().ready_events_size(); ++i) {
          response->add_done_events(std::string(64, 'd'));
        }
      }
      if (reject_exports_ && request.has_buffer_export()) {
        response->set_code(9);
        response->set_message("rank 0: CUDA buffer 7: cannot map");
      }
      return okStatus();
    };
    return std::make_unique<CudaSession>(options, loader, channel);
  }
  static const void* at(uint64_t address) { return reinterpret_cast<const void*>(address); }
  int countRequests(v1::HandoffRequest::MsgCase kind) const {
    return static_cast<int>(
        std::count_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.msg_case() == kind; }));
  }

  std::vector<FakeAllocation> allocations_ = {{0x10000, 0x1000, 7}, {0x20000, 0x1000, 8}, {0x30000, 0x1000, 9}};
  std::vector<std::string> log_;
  FakeDriver* driver_ = nullptr;  // owned by the session
  std::vector<v1::HandoffRequest> requests_;
  std::vector<size_t> fds_sent_;           // descriptors with each request
  std::map<uint64_t, uint64_t> remapped_;  // chunk address -> the block id mapped there now
  bool driver_available_ = true;
  bool reject_exports_ = false;
  int driver_loads_ = 0;
};

TEST_F(CudaSessionTest, DaemonWithoutGpusFailsBeforeAnyCudaCall) {
  auto session = makeSession({});
  auto prepared = session->prepare("w", at(0x10000), 64, nullptr);
  ASSERT_FALSE(prepared.isOk());
  EXPECT_EQ(prepared.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(prepared.status().message(), HasSubstr("CUDA tensor 'w': gradsyncd at /tmp/s has no GPU"));
  EXPECT_EQ(driver_loads_, 0);
  EXPECT_TRUE(requests_.empty());
}

TEST_F(CudaSessionTest, AttachesOnceExportsEachAllocationOnceAndComputesOffsets) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10040), 64, reinterpret_cast<void*>(5));
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  EXPECT_EQ(a->ref.buffer_id(), 7u);
  EXPECT_EQ(a->ref.offset(), 0x40u);
  ASSERT_TRUE(session->complete(*a, true).isOk());
  auto b = session->prepare("b", at(0x10100), 64, reinterpret_cast<void*>(5));  // same allocation
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b->ref.offset(), 0x100u);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kCudaAttach), 1);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 1);
  EXPECT_EQ(requests_[0].cuda_attach().device_uuid(), kGpu);
  EXPECT_EQ(requests_[0].cuda_attach().ready_events_size(), 2);
  EXPECT_EQ(requests_[1].buffer_export().bytes(), 0x1000u);
  EXPECT_EQ(requests_[1].buffer_export().buffer_id(), 7u);
  EXPECT_EQ(driver_loads_, 1);
}

TEST_F(CudaSessionTest, ReadyIsRecordedOnTheTensorsStreamAndDoneAwaitedThere) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10000), 64, reinterpret_cast<void*>(42));
  ASSERT_TRUE(a.isOk());
  EXPECT_THAT(log_.back(), HasSubstr("on 42"));
  ASSERT_TRUE(session->complete(*a, true).isOk());
  EXPECT_THAT(log_.back(), HasSubstr("wait 42 for"));
  auto b = session->prepare("b", at(0x10000), 64, reinterpret_cast<void*>(43));
  ASSERT_TRUE(b.isOk());
  const size_t before = log_.size();
  ASSERT_TRUE(session->complete(*b, false).isOk());  // failed: still waited for
  EXPECT_EQ(log_.size(), before + 1);
  EXPECT_THAT(log_.back(), HasSubstr("wait 43 for"));
}

TEST_F(CudaSessionTest, SlotsAreReusedOnlyAfterCompletion) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10000), 4, nullptr);
  auto b = session->prepare("b", at(0x10004), 4, nullptr);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_NE(a->ref.event_slot(), b->ref.event_slot());
  auto c = session->prepare("c", at(0x10008), 4, nullptr);
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(session->complete(*a, true).isOk());
  auto d = session->prepare("d", at(0x10008), 4, nullptr);
  ASSERT_TRUE(d.isOk());
  EXPECT_EQ(d->ref.event_slot(), a->ref.event_slot());
}

TEST_F(CudaSessionTest, ErrorsNameTheTensorAndTheCause) {
  auto session = makeSession();
  EXPECT_THAT(session->prepare("host", at(0x5), 4, nullptr).status().message(),
              HasSubstr("'host': the pointer is not CUDA device memory"));
  EXPECT_EQ(session->prepare("past", at(0x10ff0), 32, nullptr).status().code(), StatusCode::kOutOfRange);
  allocations_.push_back({0x40000, 0x1000, 10, /*legacy=*/false, kGpu, 0x100, /*exportable=*/false});
  auto closed = session->prepare("closed", at(0x40000), 4, nullptr);
  EXPECT_EQ(closed.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(closed.status().message(), HasSubstr("'closed': its cuMem memory cannot be exported"));
  allocations_.push_back({0x50000, 0x1000, 11, true, "GPU-other"});
  EXPECT_THAT(session->prepare("other", at(0x50000), 4, nullptr).status().message(), HasSubstr("is on GPU-other"));
  reject_exports_ = true;
  EXPECT_THAT(session->prepare("rejected", at(0x20000), 4, nullptr).status().message(),
              HasSubstr("'rejected': rank 0: CUDA buffer 7: cannot map"));
  EXPECT_EQ(session->cachedBuffers(), 0u);
}

TEST_F(CudaSessionTest, EmptyTensorsTakeEventsOnlyWhenTheyGetAnOutput) {
  auto session = makeSession();
  auto bare = session->prepareEmpty("e", nullptr, false);
  ASSERT_TRUE(bare.isOk());
  EXPECT_EQ(bare->ref.buffer_id(), 0u);
  EXPECT_EQ(bare->ref.event_slot(), 0xffffffffu);
  EXPECT_EQ(driver_loads_, 0);  // no CUDA needed at all
  EXPECT_TRUE(session->complete(*bare, true).isOk());
  EXPECT_THAT(session->prepareEmpty("g", nullptr, true).status().message(), HasSubstr("its GPU is unknown"));
  auto out = session->prepareOutput("g", at(0x10000), 16, nullptr);  // attaches
  ASSERT_TRUE(out.isOk());
  auto with_events = session->prepareEmpty("g", reinterpret_cast<void*>(9), true);
  ASSERT_TRUE(with_events.isOk());
  EXPECT_LT(with_events->ref.event_slot(), 2u);
  EXPECT_EQ(session->freeSlots(), 1);
  ASSERT_TRUE(session->complete(*with_events, true).isOk());
  EXPECT_EQ(session->freeSlots(), 2);
  EXPECT_EQ(session->prepareOutput("g", nullptr, 0, nullptr)->ref.buffer_id(), 0u);
}

TEST_F(CudaSessionTest, NoDriverIsAClearError) {
  driver_available_ = false;
  auto session = makeSession();
  EXPECT_THAT(session->prepare("w", at(0x10000), 4, nullptr).status().message(),
              HasSubstr("CUDA tensor 'w': no CUDA driver is loaded"));
}

TEST_F(CudaSessionTest, CacheIsBoundedAndReleasesWhatItForgets) {
  auto session = makeSession();
  for (uint64_t base : {0x10000, 0x20000, 0x30000}) {
    auto p = session->prepare("t", at(base), 4, nullptr);
    ASSERT_TRUE(p.isOk()) << p.status().toString();
    ASSERT_TRUE(session->complete(*p, true).isOk());
  }
  EXPECT_EQ(session->cachedBuffers(), 2u);
  ASSERT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 1);
  ASSERT_TRUE(session->releaseExports().isOk());
  EXPECT_EQ(session->cachedBuffers(), 0u);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 3);
}

TEST_F(CudaSessionTest, ExportsInUseAreNeitherEvictedNorReleased) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10000), 4, nullptr);          // in flight on buffer 7
  auto out = session->prepareOutput("a", at(0x20000), 4, nullptr);  // its output on buffer 8
  ASSERT_TRUE(a.isOk() && out.isOk());
  auto c = session->prepare("c", at(0x30000), 4, nullptr);  // past the bound of 2: nothing evictable
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 0);
  ASSERT_TRUE(session->releaseExports().isOk());
  EXPECT_EQ(session->cachedBuffers(), 3u);  // all still used
  ASSERT_TRUE(session->complete(*a, true).isOk());
  ASSERT_TRUE(session->releaseOutput(*out, true).isOk());
  ASSERT_TRUE(session->releaseExports().isOk());
  EXPECT_EQ(session->cachedBuffers(), 1u);  // "c" is still in flight
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 2);
}

// Memory of a cudaMallocAsync pool: copied on its stream into a staging
// buffer of the session (exported like cudaMalloc memory), copied back after
// the done event where the operation writes it (not for an input it only
// reads); the buffer is reused, the next stream waiting for its last copy,
// and freed by releaseExports once idle.
TEST_F(CudaSessionTest, PoolMemoryGoesThroughAStagingBuffer) {
  auto session = makeSession();
  allocations_.push_back({0x40000, 0x1000, 10, /*legacy=*/false, kGpu, 0x100, /*exportable=*/false, /*pool=*/true});
  auto* five = reinterpret_cast<void*>(5);
  auto* six = reinterpret_cast<void*>(6);
  const std::string staging = std::to_string(0x1000000);
  auto p = session->prepare("p", at(0x40010), 16, five);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->staged.staging, 0x1000000u);
  EXPECT_EQ(p->ref.offset(), 0u);
  EXPECT_THAT(log_, ::testing::Contains("alloc " + staging));
  EXPECT_THAT(log_, ::testing::Contains("copy " + staging + " <- " + std::to_string(0x40010) + " 16 on 5"));
  EXPECT_THAT(log_, ::testing::Contains("export " + staging));
  log_.clear();
  ASSERT_TRUE(session->complete(*p, true).isOk());
  ASSERT_EQ(log_.size(), 3u);
  EXPECT_THAT(log_[0], HasSubstr("wait 5 for"));
  EXPECT_EQ(log_[1], "copy " + std::to_string(0x40010) + " <- " + staging + " 16 on 5");
  EXPECT_THAT(log_[2], HasSubstr("on 5"));  // the buffer's release event
  const std::string released = log_[2].substr(7, log_[2].find(" on") - 7);
  log_.clear();
  // An input only read (allgather): no copy back; the same buffer, after
  // its last copy on stream 5.
  auto q = session->prepare("q", at(0x40000), 32, six, /*written=*/false);
  ASSERT_TRUE(q.isOk());
  EXPECT_EQ(q->staged.staging, 0x1000000u);
  EXPECT_EQ(log_[0], "wait 6 for " + released);
  EXPECT_THAT(log_, ::testing::Not(::testing::Contains(HasSubstr("alloc"))));
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 1);  // exported once
  // Its output in the pool too: a second buffer, copied back with `ok`.
  auto out = session->prepareOutput("q", at(0x40100), 64, six);
  ASSERT_TRUE(out.isOk());
  EXPECT_EQ(out->staged.staging, 0x2000000u);
  log_.clear();
  ASSERT_TRUE(session->complete(*q, true).isOk());
  EXPECT_THAT(log_, ::testing::Not(::testing::Contains(HasSubstr("copy"))));
  ASSERT_TRUE(session->releaseOutput(*out, true).isOk());
  EXPECT_THAT(log_,
              ::testing::Contains("copy " + std::to_string(0x40100) + " <- " + std::to_string(0x2000000) + " 64 on 6"));
  log_.clear();
  ASSERT_TRUE(session->releaseExports().isOk());
  EXPECT_THAT(log_, ::testing::Contains("free " + staging));
  EXPECT_THAT(log_, ::testing::Contains("free " + std::to_string(0x2000000)));
  EXPECT_EQ(session->cachedBuffers(), 0u);
}

// wait() completes on the host: the done event is polled, the caller's
// stream is not made to wait, and the slot is free again.
TEST_F(CudaSessionTest, CompleteOnHostFreesTheSlotWithoutAStreamWait) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10000), 64, reinterpret_cast<void*>(5));
  ASSERT_TRUE(a.isOk());
  auto b = session->prepare("b", at(0x10040), 64, reinterpret_cast<void*>(5));
  ASSERT_TRUE(b.isOk());
  EXPECT_TRUE(session->slotsExhausted());
  log_.clear();
  ASSERT_TRUE(session
                  ->completeOnHost(
                      *a, "a", [] { return okStatus(); }, std::chrono::seconds(5))
                  .isOk());
  EXPECT_FALSE(session->slotsExhausted());
  EXPECT_EQ(session->freeSlots(), 1);
  for (const auto& entry : log_) EXPECT_EQ(entry.rfind("wait", 0), std::string::npos) << entry;
}

TEST_F(CudaSessionTest, CompleteOnHostEndsWhenTheSessionBreaks) {
  auto session = makeSession();
  auto a = session->prepare("a", at(0x10000), 64, nullptr);
  ASSERT_TRUE(a.isOk());
  driver_->pending = true;
  int asked = 0;
  auto broken = [&] { return ++asked < 3 ? okStatus() : unavailable("gradsyncd at /tmp/s closed the session"); };
  Status done = session->completeOnHost(*a, "a", broken, std::chrono::seconds(5));
  EXPECT_EQ(done.code(), StatusCode::kUnavailable);
  EXPECT_THAT(done.message(), HasSubstr("closed the session"));
  EXPECT_EQ(session->freeSlots(), 2);
}

TEST_F(CudaSessionTest, CompleteOnHostPastItsLimitLeavesTheStreamWaitingAndNamesTheTensor) {
  auto session = makeSession();
  auto a = session->prepare("grad.w", at(0x10000), 64, reinterpret_cast<void*>(5));
  ASSERT_TRUE(a.isOk());
  driver_->pending = true;
  log_.clear();
  Status done = session->completeOnHost(
      *a, "grad.w", [] { return okStatus(); }, std::chrono::milliseconds(20));
  EXPECT_EQ(done.code(), StatusCode::kDeadlineExceeded);
  EXPECT_THAT(done.message(), HasSubstr("CUDA tensor 'grad.w': the daemon's GPU work did not finish"));
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_EQ(log_[0].rfind("wait 5 for", 0), 0u) << log_[0];
  EXPECT_EQ(session->freeSlots(), 2);
}

}  // namespace
}  // namespace gradsync::client

namespace gradsync::client {
namespace {

// cuMem memory (PyTorch's expandable segments): the mappings under a tensor
// go as one view, a descriptor each, exported once and reused while the
// mappings stay the same.
TEST_F(CudaSessionTest, CuMemTensorsExportTheMappingsUnderThemOnceAsAView) {
  allocations_.push_back({0x40000, 0x1000, 10, /*legacy=*/false});
  auto session = makeSession();
  auto first = session->prepare("spans", at(0x40080), 0x200, nullptr);  // mappings 0x40000, 0x40100, 0x40200
  ASSERT_TRUE(first.isOk()) << first.status().message();
  EXPECT_GE(first->ref.buffer_id(), uint64_t{1} << 62);
  EXPECT_EQ(first->ref.offset(), 0x80u);
  ASSERT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 1);
  const auto& exported = requests_.back().buffer_export();
  EXPECT_EQ(exported.bytes(), 0x300u);
  EXPECT_EQ(exported.chunk_bytes_size(), 3);
  EXPECT_TRUE(exported.ipc_handle().empty());
  EXPECT_EQ(fds_sent_.back(), 3u);
  ASSERT_TRUE(session->complete(*first, true).isOk());
  // The same tensor, and a smaller one from the same first mapping: no export.
  auto again = session->prepare("spans", at(0x40080), 0x200, nullptr);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(again->ref.buffer_id(), first->ref.buffer_id());
  auto inside = session->prepare("inside", at(0x40010), 0x10, nullptr);
  ASSERT_TRUE(inside.isOk());
  EXPECT_EQ(inside->ref.buffer_id(), first->ref.buffer_id());
  EXPECT_EQ(inside->ref.offset(), 0x10u);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 1);
  EXPECT_EQ(session->cachedBuffers(), 1u);
}

// The allocator unmapped a chunk and mapped other memory there: the view is
// exported again (the daemon's old mapping holds the old memory), and the
// old view is released once the operation using it is done.
TEST_F(CudaSessionTest, AReplacedMappingIsExportedAgainAndTheOldViewReleasedOnceIdle) {
  allocations_.push_back({0x40000, 0x1000, 10, /*legacy=*/false});
  auto session = makeSession();
  auto before = session->prepare("t", at(0x40000), 0x180, nullptr);
  ASSERT_TRUE(before.isOk());
  remapped_[0x40100] = 77;
  auto after = session->prepare("t", at(0x40000), 0x180, nullptr);
  ASSERT_TRUE(after.isOk()) << after.status().message();
  EXPECT_NE(after->ref.buffer_id(), before->ref.buffer_id());
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 2);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 0);  // the first is still in flight
  ASSERT_TRUE(session->complete(*before, true).isOk());
  ASSERT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 1);
  EXPECT_EQ(requests_.back().buffer_release().buffer_id(), before->ref.buffer_id());
  ASSERT_TRUE(session->complete(*after, true).isOk());
  // A tensor reaching past the view: a longer view replaces it at once.
  auto longer = session->prepare("t", at(0x40000), 0x280, nullptr);
  ASSERT_TRUE(longer.isOk());
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 3);
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferRelease), 2);
  EXPECT_EQ(session->cachedBuffers(), 1u);
  ASSERT_TRUE(session->complete(*longer, true).isOk());
  // Released views are exported again on their next use.
  ASSERT_TRUE(session->releaseExports().isOk());
  ASSERT_TRUE(session->prepare("t", at(0x40000), 0x10, nullptr).isOk());
  EXPECT_EQ(countRequests(v1::HandoffRequest::kBufferExport), 4);
}

TEST_F(CudaSessionTest, ATensorOverMoreMappingsThanOneExportHoldsIsRefused) {
  allocations_.push_back({0x100000, 0x10000, 10, /*legacy=*/false, kGpu, /*chunk=*/0x10});
  auto session = makeSession();
  auto refused = session->prepare("huge", at(0x100000), 251 * 0x10, nullptr);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(refused.status().message(), HasSubstr("'huge': its 4016 bytes span more than 250 cuMem mappings"));
  EXPECT_TRUE(session->prepare("fits", at(0x100000), 250 * 0x10, nullptr).isOk());
  EXPECT_EQ(fds_sent_.back(), 250u);
}

}  // namespace
}  // namespace gradsync::client
