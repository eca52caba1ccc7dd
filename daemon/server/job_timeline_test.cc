// SPDX-License-Identifier: Apache-2.0
#include "daemon/server/job_timeline.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JobTimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/gs-job-timeline-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    path_ = path;
    fd_ = UniqueFd(fd);
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string text() const {
    std::ifstream in(path_);
    std::stringstream out;
    out << in.rdbuf();
    return out.str();
  }
  static coordinator::Request request(int rank, const std::string& name) {
    coordinator::Request r;
    r.rank = rank;
    r.name = name;
    r.type = v1::ALLREDUCE;
    r.dtype = v1::FLOAT32;
    r.length = 64;
    return r;
  }
  static fusion::FusedResponse fused(const std::string& name) {
    coordinator::Response response;
    response.name = name;
    response.type = v1::ALLREDUCE;
    response.ranks = {0, 1};
    response.requests = {request(0, name), request(1, name)};
    return fusion::FusedResponse{{response}, 64};
  }
  std::string path_;
  UniqueFd fd_;
};

TEST_F(JobTimelineTest, RecordsNothingWhileOff) {
  JobTimeline timeline;
  timeline.requestArrived(request(0, "w"));
  timeline.negotiated("w", v1::ALLREDUCE);
  timeline.executionBegins(fused("w"));
  timeline.phase("RING_ALLREDUCE", true);
  timeline.executionEnds(fused("w"), {});
  EXPECT_EQ(text(), "");  // the file was never handed over
}

TEST_F(JobTimelineTest, NegotiationRowWithARankInstantEachThenTheExecutionWithItsPhases) {
  JobTimeline timeline;
  ASSERT_TRUE(timeline.start(std::move(fd_), /*mark_cycles=*/false).isOk());
  timeline.requestArrived(request(0, "w"));
  timeline.requestArrived(request(1, "w"));
  timeline.negotiated("w", v1::ALLREDUCE);
  timeline.executionBegins(fused("w"));
  timeline.phase("RING_ALLREDUCE", true);
  timeline.phase("RING_ALLREDUCE", false);
  std::vector<executor::ResponseResult> results(1);
  timeline.executionEnds(fused("w"), results);
  timeline.stop();
  const std::string json = text();
  EXPECT_THAT(json, HasSubstr("\"NEGOTIATE_ALLREDUCE\""));
  EXPECT_THAT(json, HasSubstr("rank 0 ready"));
  EXPECT_THAT(json, HasSubstr("rank 1 ready"));
  EXPECT_THAT(json, HasSubstr("\"ALLREDUCE\""));
  EXPECT_THAT(json, HasSubstr("\"RING_ALLREDUCE\""));
  EXPECT_THAT(json, HasSubstr("\"fused_tensors\":1"));
  EXPECT_THAT(json, HasSubstr("\"ok\":true"));
  // One negotiation row: the second rank's request does not open another.
  const std::string begin = "\"ph\":\"B\",\"name\":\"NEGOTIATE_ALLREDUCE\"";
  size_t count = 0;
  for (size_t at = json.find(begin); at != std::string::npos; at = json.find(begin, at + 1)) ++count;
  EXPECT_EQ(count, 1u) << json;
}

TEST_F(JobTimelineTest, AFailedResultEndsItsRowNotOk) {
  JobTimeline timeline;
  ASSERT_TRUE(timeline.start(std::move(fd_), false).isOk());
  timeline.executionBegins(fused("w"));
  std::vector<executor::ResponseResult> results(1);
  results[0].status = aborted("a rank left");
  timeline.executionEnds(fused("w"), results);
  timeline.stop();
  EXPECT_THAT(text(), HasSubstr("\"ok\":false"));
  EXPECT_THAT(text(), Not(HasSubstr("NEGOTIATE")));  // negotiated elsewhere (a follower)
}

}  // namespace
}  // namespace gradsync::server
