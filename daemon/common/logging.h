// SPDX-License-Identifier: Apache-2.0
// Component loggers on spdlog (Envoy's logger.h idea): a fixed list of
// components, each its own spdlog logger, level checked before formatting.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

#include "base/status.h"
#include "daemon/common/log_limit.h"

namespace gradsync {

#define GS_ALL_LOGGER_IDS(X) \
  X(main)                    \
  X(control)                 \
  X(admin)                   \
  X(coordinator)             \
  X(fusion)                  \
  X(handoff)                 \
  X(executor)                \
  X(gpu)                     \
  X(client)

enum class LoggerId {
#define GS_LOGGER_ENUM(name) name,
  GS_ALL_LOGGER_IDS(GS_LOGGER_ENUM)
#undef GS_LOGGER_ENUM
};

// Returns the logger of a component, creating every component logger (stderr,
// no colours) on first use. Thread-safe.
spdlog::logger& componentLogger(LoggerId id);

// Sets the level of every component logger. Errors on an unknown level name.
Status setLogLevel(const std::string& level_name);

// GS_LOG's end: one line (newlines become " | "), the same message from one
// call site at most once a second (`site`), with the count held back.
void logAtSite(LogSite& site, spdlog::logger& logger, spdlog::level::level_enum level, std::string message);

}  // namespace gradsync

// GS_LOG(main, info, "fmt {}", x) (levels: trace debug info warn err critical): the arguments are only formatted when
// the level is enabled; each call site repeats a message at most once a second (logAtSite).
#define GS_LOG(component, lvl, ...)                                                                \
  do {                                                                                             \
    auto& gs_logger_ = ::gradsync::componentLogger(::gradsync::LoggerId::component);               \
    if (gs_logger_.should_log(spdlog::level::lvl)) {                                               \
      static ::gradsync::LogSite gs_site_;                                                         \
      ::gradsync::logAtSite(gs_site_, gs_logger_, spdlog::level::lvl, ::fmt::format(__VA_ARGS__)); \
    }                                                                                              \
  } while (0)
