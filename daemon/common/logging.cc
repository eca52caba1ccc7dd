// SPDX-License-Identifier: Apache-2.0
#include "daemon/common/logging.h"

#include <errno.h>  // program_invocation_short_name
#include <spdlog/sinks/stdout_sinks.h>

#include <array>
#include <mutex>

#include "daemon/common/journal.h"

namespace gradsync {
namespace {

constexpr const char* kLoggerNames[] = {
#define GS_LOGGER_NAME(name) #name,
    GS_ALL_LOGGER_IDS(GS_LOGGER_NAME)
#undef GS_LOGGER_NAME
};
constexpr size_t kLoggerCount = sizeof(kLoggerNames) / sizeof(kLoggerNames[0]);

// The loggers themselves live in spdlog's registry; this table only caches
// pointers to them, filled once.
struct LoggerTable {
  std::array<std::shared_ptr<spdlog::logger>, kLoggerCount> loggers;
  LoggerTable() {
    // Under systemd, entries with fields in the journal; else lines on stderr.
    std::shared_ptr<spdlog::sinks::sink> sink = journalSinkIfStderrIsJournal(program_invocation_short_name);
    if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    for (size_t i = 0; i < kLoggerCount; ++i) {
      loggers[i] = std::make_shared<spdlog::logger>(kLoggerNames[i], sink);
      loggers[i]->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
      loggers[i]->set_level(spdlog::level::info);
    }
  }
};

LoggerTable& table() {
  static LoggerTable* t = new LoggerTable();  // never destroyed: usable at exit
  return *t;
}

}  // namespace

spdlog::logger& componentLogger(LoggerId id) { return *table().loggers[static_cast<size_t>(id)]; }

void logAtSite(LogSite& site, spdlog::logger& logger, spdlog::level::level_enum level, std::string message) {
  for (size_t at = message.find('\n'); at != std::string::npos; at = message.find('\n', at)) {
    message.replace(at, 1, " | ");
  }
  uint64_t dropped = 0;
  if (!site.admit(message, LogSite::Clock::now(), &dropped)) return;
  if (dropped > 0) {
    logger.log(level, "{} (repeated {} more times in the last seconds, not logged)", message, dropped);
  } else {
    logger.log(level, "{}", message);
  }
}

Status setLogLevel(const std::string& level_name) {
  auto level = spdlog::level::from_str(level_name);
  if (level == spdlog::level::off && level_name != "off") {
    return invalidArgument("unknown log level '" + level_name +
                           "' (expected trace, debug, info, warn, error, critical or off)");
  }
  for (auto& logger : table().loggers) logger->set_level(level);
  return okStatus();
}

}  // namespace gradsync
