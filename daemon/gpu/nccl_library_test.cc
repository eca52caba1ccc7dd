// SPDX-License-Identifier: Apache-2.0
#include "daemon/gpu/nccl_library.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace gradsync::gpu {
namespace {

using ::testing::HasSubstr;

TEST(NcclLibrary, VersionStrings) {
  EXPECT_EQ(ncclVersionString(22809), "2.28.9");
  EXPECT_EQ(ncclVersionString(23007), "2.30.7");
  EXPECT_EQ(ncclVersionString(2708), "2.7.8");
}

TEST(NcclLibrary, NamedLibraryThatIsMissingIsAnError) {
  auto library = NcclLibrary::load("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(library.isOk());
  EXPECT_EQ(library.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(library.status().message(), HasSubstr("/nonexistent/libnccl.so.2"));
}

TEST(NcclLibrary, NamedFileThatIsNotNccl) {
  auto library = NcclLibrary::load("libc.so.6");
  ASSERT_FALSE(library.isOk());
  EXPECT_THAT(library.status().message(), HasSubstr("lacks ncclGetVersion"));
}

// The build machines carry NCCL with the CUDA toolkit; ncclGetUniqueId needs
// neither a driver nor a GPU, which is what lets CI test id distribution.
TEST(NcclLibrary, LoadsAndMakesUniqueIdsWithoutAGpu) {
  ASSERT_EQ(::access("/usr/local/cuda/lib64/libnccl.so.2", R_OK), 0)
      << "no NCCL at /usr/local/cuda/lib64: the build machines carry it with the CUDA toolkit";
  auto library = NcclLibrary::load("");
  ASSERT_TRUE(library.isOk()) << library.status().toString();
  EXPECT_GE((*library)->version(), kMinNcclVersion);
  EXPECT_THAT((*library)->path(), HasSubstr("libnccl.so"));
  auto a = (*library)->uniqueId();
  auto b = (*library)->uniqueId();
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a->size(), 128u);
  EXPECT_NE(*a, *b);
  EXPECT_THAT((*library)->errorText(ncclInvalidArgument), HasSubstr("NCCL error 4"));
}

}  // namespace
}  // namespace gradsync::gpu
