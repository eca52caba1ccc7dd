// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/client_gpu.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "daemon/gpu/fake_gpu_backend.h"

namespace gradsync::gpu {
namespace {

using ::testing::HasSubstr;

constexpr const char* kUuid = "GPU-00000000-0000-0000-0000-000000000001";

v1::CudaAttach attachRequest(int events) {
  v1::CudaAttach request;
  request.set_device_uuid(kUuid);
  for (int i = 0; i < events; ++i) request.add_ready_events(std::string(kIpcHandleBytes, static_cast<char>(i)));
  return request;
}

v1::CudaBufferExport exportRequest(uint64_t id, uint64_t bytes, char fill = 'h') {
  v1::CudaBufferExport request;
  request.set_buffer_id(id);
  request.set_bytes(bytes);
  request.set_ipc_handle(std::string(kIpcHandleBytes, fill));
  request.set_device_uuid(kUuid);
  return request;
}

class ClientGpuTest : public ::testing::Test {
 protected:
  std::unique_ptr<ClientGpu> attach(int events = 4) {
    auto client = ClientGpu::attach(&backend_, 0, kUuid, attachRequest(events), "rank 1 (pid 7, host h)");
    EXPECT_TRUE(client.isOk()) << client.status().toString();
    return client.isOk() ? std::move(client).value() : nullptr;
  }
  FakeGpuBackend backend_;
};

TEST_F(ClientGpuTest, AttachOpensEveryReadyEventAndCreatesDoneEvents) {
  auto client = attach(4);
  EXPECT_EQ(client->eventSlots(), 4);
  EXPECT_EQ(client->doneEventHandles().size(), 4u);
  for (const auto& handle : client->doneEventHandles()) EXPECT_EQ(handle.size(), kIpcHandleBytes);
  EXPECT_EQ(backend_.live_events.size(), 8u);
  client.reset();
  EXPECT_TRUE(backend_.live_events.empty());
}

TEST_F(ClientGpuTest, AttachRejectsBadEventLists) {
  EXPECT_FALSE(ClientGpu::attach(&backend_, 0, kUuid, attachRequest(0), "r").isOk());
  EXPECT_FALSE(ClientGpu::attach(&backend_, 0, kUuid, attachRequest(kMaxEventSlots + 1), "r").isOk());
  auto bad = attachRequest(2);
  bad.set_ready_events(1, "short");
  auto client = ClientGpu::attach(&backend_, 0, kUuid, bad, "rank 3");
  ASSERT_FALSE(client.isOk());
  EXPECT_THAT(client.status().message(), HasSubstr("rank 3: ready event 1 has 5 bytes"));
  EXPECT_TRUE(backend_.live_events.empty());  // what was opened before the error is released
}

TEST_F(ClientGpuTest, EachAllocationIsMappedOnce) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(exportRequest(11, 1 << 20)).isOk());
  ASSERT_TRUE(client->addBuffer(exportRequest(11, 1 << 20)).isOk());  // a resend: no second open
  EXPECT_EQ(backend_.memory_opens, 1);
  auto other = client->addBuffer(exportRequest(11, 2 << 20));
  EXPECT_EQ(other.code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(client->addBuffer(exportRequest(12, 4096, 'g')).isOk());
  EXPECT_EQ(backend_.memory_opens, 2);
  EXPECT_EQ(client->bufferCount(), 2u);
}

TEST_F(ClientGpuTest, MappingsAreBoundedPerClientAndForTheDaemon) {
  Budget daemon("CUDA IPC mappings", 3);
  auto a = ClientGpu::attach(&backend_, 0, kUuid, attachRequest(1), "rank 0", {2, &daemon});
  auto b = ClientGpu::attach(&backend_, 0, kUuid, attachRequest(1), "rank 1", {2, &daemon});
  ASSERT_TRUE(a.isOk() && b.isOk());
  ASSERT_TRUE((*a)->addBuffer(exportRequest(1, 4096)).isOk());
  ASSERT_TRUE((*a)->addBuffer(exportRequest(2, 4096)).isOk());
  const Status third = (*a)->addBuffer(exportRequest(3, 4096));
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), HasSubstr("already 2 allocations mapped, the most one rank may have"));
  ASSERT_TRUE((*b)->addBuffer(exportRequest(1, 4096)).isOk());
  const Status over = (*b)->addBuffer(exportRequest(2, 4096));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("max_ipc_mappings"));
  EXPECT_EQ(backend_.memory_opens, 3);  // refused before the driver is asked
  ASSERT_TRUE((*a)->removeBuffer(1).isOk());
  EXPECT_EQ(daemon.used(), 2u);  // an unmapped allocation gives its place back
  EXPECT_TRUE((*b)->addBuffer(exportRequest(2, 4096)).isOk());
  a->reset();
  b->reset();
  EXPECT_EQ(daemon.used(), 0u);
}

TEST_F(ClientGpuTest, LookupsAreBoundsChecked) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(exportRequest(5, 1024)).isOk());
  auto base = client->locate(5, 0, 1024);
  ASSERT_TRUE(base.isOk());
  auto inside = client->locate(5, 1000, 24);
  ASSERT_TRUE(inside.isOk());
  EXPECT_EQ(inside->data - base->data, 1000);
  EXPECT_EQ(client->check(5, 1000, 25).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(client->check(5, 1025, 0).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(client->check(5, 8, ~uint64_t{0}).code(), StatusCode::kOutOfRange);  // wraps
  EXPECT_EQ(client->check(~uint64_t{0}, 8, 8).code(), StatusCode::kInvalidArgument);
  auto unknown = client->check(6, 0, 4);
  EXPECT_EQ(unknown.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("CUDA buffer 6 was never exported"));
  EXPECT_TRUE(client->checkSlot(3).isOk());
  EXPECT_FALSE(client->checkSlot(4).isOk());
}

TEST_F(ClientGpuTest, ExportsAreCheckedBeforeMapping) {
  auto client = attach();
  auto wrong_gpu = exportRequest(1, 64);
  wrong_gpu.set_device_uuid("GPU-other");
  EXPECT_THAT(client->addBuffer(wrong_gpu).message(), HasSubstr("is on GPU-other"));
  auto short_handle = exportRequest(1, 64);
  short_handle.set_ipc_handle("x");
  EXPECT_FALSE(client->addBuffer(short_handle).isOk());
  EXPECT_FALSE(client->addBuffer(exportRequest(1, 0)).isOk());
  backend_.fail_open = true;
  auto failed = client->addBuffer(exportRequest(2, 64));
  EXPECT_THAT(failed.message(), HasSubstr("cannot map: cudaErrorMapBufferObjectFailed"));
  EXPECT_EQ(backend_.open_memory.size(), 0u);
}

TEST_F(ClientGpuTest, AnExportLargerThanTheDriverSaysIsRefused) {
  auto client = attach();
  backend_.mapped_bytes = 4096;
  auto lying = client->addBuffer(exportRequest(1, 8192));
  EXPECT_EQ(lying.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(lying.message(), HasSubstr("claims 8192 bytes, but the allocation holds 4096"));
  EXPECT_TRUE(backend_.open_memory.empty());
  EXPECT_TRUE(client->addBuffer(exportRequest(1, 4096)).isOk());
}

TEST_F(ClientGpuTest, AMappingInUseIsClosedOnlyAfterItsLastWork) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(exportRequest(1, 64)).isOk());
  ASSERT_TRUE(client->addBuffer(exportRequest(2, 64)).isOk());
  auto in_use = client->locate(1, 0, 64);  // an executor holds it
  ASSERT_TRUE(in_use.isOk());
  ASSERT_TRUE(client->removeBuffer(1).isOk());
  EXPECT_EQ(client->removeBuffer(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(client->bufferCount(), 1u);
  EXPECT_EQ(backend_.open_memory.size(), 2u);       // still mapped: work may be queued on it
  in_use = Status(StatusCode::kCancelled, "done");  // the executor let go
  EXPECT_EQ(backend_.open_memory.size(), 1u);
  EXPECT_EQ(backend_.deferred_closes, 1);  // handed to the reaper with its last-use event
  client.reset();                          // the rank went away
  EXPECT_TRUE(backend_.open_memory.empty());
  EXPECT_TRUE(backend_.live_events.empty());
}

TEST_F(ClientGpuTest, AMappingWhoseLastWorkNeverFinishesIsLeftOpenNotClosedUnderIt) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(exportRequest(1, 64)).isOk());
  backend_.stuck = true;
  client.reset();
  EXPECT_EQ(backend_.open_memory.size(), 1u);
}

TEST_F(ClientGpuTest, AMappingWhoseLastUseWasNotRecordedIsNeverUnmapped) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(exportRequest(1, 64)).isOk());
  auto located = client->locate(1, 0, 64);
  ASSERT_TRUE(located.isOk());
  located->mapping->keepMapped();
  located = Status(StatusCode::kCancelled, "done");
  client.reset();
  EXPECT_EQ(backend_.open_memory.size(), 1u);
  EXPECT_EQ(backend_.deferred_closes, 0);
}

// cuMem memory: one descriptor per chunk with the frame; every count and
// size is checked before anything is mapped.
v1::CudaBufferExport chunkRequest(uint64_t id, const std::vector<uint64_t>& chunks) {
  v1::CudaBufferExport request;
  request.set_buffer_id(id);
  request.set_device_uuid(kUuid);
  uint64_t total = 0;
  for (uint64_t bytes : chunks) {
    request.add_chunk_bytes(bytes);
    total += bytes;
  }
  request.set_bytes(total);
  return request;
}

std::vector<UniqueFd> descriptors(size_t n) {
  std::vector<UniqueFd> fds;
  for (size_t i = 0; i < n; ++i) fds.emplace_back(::dup(STDERR_FILENO));
  return fds;
}

TEST_F(ClientGpuTest, CuMemChunksAreCheckedThenMappedAsOneRange) {
  auto client = attach();
  ASSERT_TRUE(client->addBuffer(chunkRequest(1ull << 62, {2 << 20, 2 << 20}), descriptors(2)).isOk());
  EXPECT_EQ(backend_.memory_opens, 1);
  EXPECT_EQ(backend_.open_memory.begin()->second, "2 chunks");
  auto located = client->locate(1ull << 62, (2 << 20) + 8, 2 << 20);  // reaches past the end
  EXPECT_EQ(located.status().code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(client->locate(1ull << 62, (2 << 20) - 8, 16).isOk());  // across the two chunks
  // A resend of the same chunks: no second mapping.
  ASSERT_TRUE(client->addBuffer(chunkRequest(1ull << 62, {2 << 20, 2 << 20}), descriptors(2)).isOk());
  EXPECT_EQ(backend_.memory_opens, 1);
  EXPECT_EQ(client->addBuffer(chunkRequest(1ull << 62, {4 << 20}), descriptors(1)).code(), StatusCode::kAlreadyExists);

  auto fewer = client->addBuffer(chunkRequest(2, {4096, 4096}), descriptors(1));
  EXPECT_THAT(fewer.message(), HasSubstr("CUDA buffer 2 (8192 bytes): cannot map: 2 cuMem chunks but 1 descriptors"));
  auto lying = chunkRequest(3, {4096, 4096});
  lying.set_bytes(4096);
  EXPECT_THAT(client->addBuffer(lying, descriptors(2)).message(), HasSubstr("do not add up to 4096"));
  lying.set_bytes(1 << 20);
  EXPECT_THAT(client->addBuffer(lying, descriptors(2)).message(), HasSubstr("chunks of 8192 bytes for an export of"));
  auto zero = chunkRequest(4, {4096, 0});
  EXPECT_EQ(client->addBuffer(zero, descriptors(2)).code(), StatusCode::kInvalidArgument);
  auto both = chunkRequest(5, {4096});
  both.set_ipc_handle(std::string(kIpcHandleBytes, 'h'));
  EXPECT_THAT(client->addBuffer(both, descriptors(1)).message(), HasSubstr("both an IPC handle and cuMem chunks"));
  EXPECT_THAT(client->addBuffer(exportRequest(6, 4096), descriptors(1)).message(),
              HasSubstr("descriptors with an IPC handle export"));
  std::vector<uint64_t> many(251, 4096);
  EXPECT_THAT(client->addBuffer(chunkRequest(7, many), descriptors(1)).message(), HasSubstr("251 cuMem chunks"));
  EXPECT_EQ(backend_.memory_opens, 1);  // none of these reached the driver
  EXPECT_EQ(client->bufferCount(), 1u);
}

// Each chunk of a cuMem view is a mapping of the daemon's budget.
TEST_F(ClientGpuTest, EachCuMemChunkCountsAgainstTheDaemonsMappings) {
  Budget daemon("CUDA IPC mappings", 3);
  auto client = ClientGpu::attach(&backend_, 0, kUuid, attachRequest(1), "rank 0", {16, &daemon});
  ASSERT_TRUE(client.isOk());
  ASSERT_TRUE((*client)->addBuffer(chunkRequest(1, {4096, 4096}), descriptors(2)).isOk());
  EXPECT_EQ(daemon.used(), 2u);
  const Status over = (*client)->addBuffer(chunkRequest(2, {4096, 4096}), descriptors(2));
  EXPECT_EQ(over.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(over.message(), HasSubstr("max_ipc_mappings"));
  ASSERT_TRUE((*client)->removeBuffer(1).isOk());
  EXPECT_EQ(daemon.used(), 0u);
  client->reset();
}

}  // namespace
}  // namespace gradsync::gpu
