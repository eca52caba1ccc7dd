// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/journal.h"

#include <spdlog/sinks/base_sink.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/unique_fd.h"
#include "daemon/common/environment.h"

namespace gradsync {
namespace {

constexpr const char* kJournalSocket = "/run/systemd/journal/socket";

// syslog priorities of spdlog's levels.
int priorityOf(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug:
      return 7;
    case spdlog::level::info:
      return 6;
    case spdlog::level::warn:
      return 4;
    case spdlog::level::err:
      return 3;
    case spdlog::level::critical:
      return 2;
    default:
      return 6;
  }
}

// Native protocol: FIELD=value lines in one datagram (values here never
// hold a newline: messages are flattened before they reach a sink).
class JournalSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  JournalSink(UniqueFd fd, sockaddr_un address, std::string identifier)
      : fd_(std::move(fd)), address_(address), identifier_(std::move(identifier)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string message(msg.payload.data(), msg.payload.size());
    std::string entry = "MESSAGE=" + message + "\nPRIORITY=" + std::to_string(priorityOf(msg.level)) +
                        "\nSYSLOG_IDENTIFIER=" + identifier_ +
                        "\nGRADSYNC_COMPONENT=" + std::string(msg.logger_name.data(), msg.logger_name.size()) + "\n";
    const LogFields fields = fieldsOf(message);
    if (!fields.job.empty()) entry += "GRADSYNC_JOB=" + fields.job + "\n";
    if (!fields.rank.empty()) entry += "GRADSYNC_RANK=" + fields.rank + "\n";
    const ssize_t sent = ::sendto(fd_.get(), entry.data(), entry.size(), MSG_NOSIGNAL,
                                  reinterpret_cast<const sockaddr*>(&address_), sizeof(address_));
    // The journal is gone or full: the line still reaches stderr.
    if (sent < 0) std::fprintf(stderr, "<%d>[%s] %s\n", priorityOf(msg.level), msg.logger_name.data(), message.c_str());
  }
  void flush_() override {}

 private:
  UniqueFd fd_;
  sockaddr_un address_;
  std::string identifier_;
};

bool stderrIsJournal() {
  const std::string stream = environment::journalStream();
  if (stream.empty()) return false;
  struct stat st {};
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) == stream;
}

}  // namespace

LogFields fieldsOf(const std::string& message) {
  LogFields fields;
  const size_t job = message.find("job '");
  if (job != std::string::npos) {
    const size_t end = message.find('\'', job + 5);
    if (end != std::string::npos) fields.job = message.substr(job + 5, end - job - 5);
  }
  for (size_t at = message.find("rank "); at != std::string::npos; at = message.find("rank ", at + 1)) {
    const bool word = at == 0 || !std::isalnum(static_cast<unsigned char>(message[at - 1]));
    size_t digits = at + 5;
    while (digits < message.size() && std::isdigit(static_cast<unsigned char>(message[digits]))) ++digits;
    if (word && digits > at + 5) {
      fields.rank = message.substr(at + 5, digits - at - 5);
      break;
    }
  }
  return fields;
}

std::shared_ptr<spdlog::sinks::sink> journalSinkIfStderrIsJournal(const std::string& identifier) {
  if (!stderrIsJournal()) return nullptr;
  const std::string override_path = environment::journalSocket();
  const std::string path = !override_path.empty() ? override_path : kJournalSocket;
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return nullptr;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return nullptr;
  return std::make_shared<JournalSink>(std::move(fd), address, identifier);
}

}  // namespace gradsync
