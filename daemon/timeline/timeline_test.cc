// SPDX-License-Identifier: Apache-2.0
#include "daemon/timeline/timeline.h"

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync::timeline {
namespace {

using ::testing::HasSubstr;

class TimelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/gs-timeline-XXXXXX";
    const int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    path_ = path;
    fd_ = UniqueFd(fd);
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  // The file parsed as a JSON array (fails the test when it is not one).
  google::protobuf::ListValue parse() {
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    google::protobuf::ListValue list;
    auto status = google::protobuf::util::JsonStringToMessage(text.str(), &list);
    EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text.str();
    return list;
  }
  static std::string eventJson(const google::protobuf::ListValue& list, int i) {
    std::string json;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(list.values(i), &json).ok());
    return json;
  }
  std::string path_;
  UniqueFd fd_;
};

// A span measured elsewhere (the GPU's) is one complete event on the
// tensor's second track, with its start and duration in microseconds.
TEST_F(TimelineTest, ASpanIsACompleteEventOnTheSecondTrack) {
  auto timeline = Timeline::start(std::move(fd_), /*mark_cycles=*/false);
  ASSERT_TRUE(timeline.isOk()) << timeline.status().toString();
  const auto start = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
  (*timeline)->span("w.grad", "GPU_REDUCE", start, start + std::chrono::microseconds(1500));
  const auto list = parse();
  ASSERT_EQ(list.values_size(), 3);
  const auto& event = list.values(2).struct_value().fields();
  EXPECT_EQ(event.at("ph").string_value(), "X");
  EXPECT_EQ(event.at("name").string_value(), "GPU_REDUCE");
  EXPECT_EQ(event.at("tid").number_value(), 1);
  EXPECT_EQ(event.at("dur").number_value(), 1500);
  EXPECT_GE(event.at("ts").number_value(), 5000);
}

TEST_F(TimelineTest, ValidJsonAfterEveryEventWithOneRowPerTensor) {
  ASSERT_EQ(::write(fd_.get(), "old content that must go", 24), 24);
  auto timeline = Timeline::start(std::move(fd_), /*mark_cycles=*/true);
  ASSERT_TRUE(timeline.isOk()) << timeline.status().toString();
  EXPECT_EQ(parse().values_size(), 0);
  (*timeline)->begin("w.grad", "NEGOTIATE_ALLREDUCE");
  EXPECT_EQ(parse().values_size(), 3);  // process_name, sort index, the event
  (*timeline)->instant("w.grad", "rank 1 ready", {{"rank", "1"}});
  (*timeline)->end("w.grad", "NEGOTIATE_ALLREDUCE");
  (*timeline)->begin("b\"ias\n\xff", "ALLREDUCE", {{"bytes", "4096"}, {"dtype", "\"float32\""}});
  (*timeline)->cycle();
  auto list = parse();
  ASSERT_EQ(list.values_size(), 11);  // the cycle marker has a row of its own
  // Fields are read back through the library (re-encoded), not the Map
  // accessors: those are inline and differ under sanitizer builds.
  EXPECT_THAT(eventJson(list, 5), HasSubstr(R"("name":"process_name")"));
  EXPECT_THAT(eventJson(list, 5), HasSubstr(R"("name":"b\"ias\nÿ")"));
  EXPECT_THAT(eventJson(list, 7), HasSubstr(R"("ph":"B")"));
  EXPECT_THAT(eventJson(list, 7), HasSubstr(R"("pid":2)"));
  EXPECT_THAT(eventJson(list, 7), HasSubstr(R"("bytes":4096)"));
  EXPECT_THAT(eventJson(list, 10), HasSubstr(R"("name":"CYCLE_START")"));
  EXPECT_EQ((*timeline)->events(), 11u);
  EXPECT_EQ((*timeline)->error(), "");
}

TEST_F(TimelineTest, ConcurrentWritersKeepTheFileValid) {
  auto timeline = Timeline::start(std::move(fd_), false);
  ASSERT_TRUE(timeline.isOk());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) (*timeline)->instant("t" + std::to_string(t % 2), "e" + std::to_string(i));
    });
  }
  for (auto& t : threads) t.join();
  (*timeline)->cycle();  // no marker without mark_cycles
  EXPECT_EQ(parse().values_size(), 800 + 4);
}

TEST_F(TimelineTest, RefusesWhatIsNotARegularFile) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  ::close(pipe_fds[0]);
  EXPECT_FALSE(Timeline::start(UniqueFd(pipe_fds[1]), false).isOk());
  EXPECT_FALSE(Timeline::start(UniqueFd(), false).isOk());
}

}  // namespace
}  // namespace gradsync::timeline
