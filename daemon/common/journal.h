// SPDX-License-Identifier: Apache-2.0
// Logging to systemd's journal with fields: when the process's stderr is
// the journal (systemd sets JOURNAL_STREAM to its device:inode), each
// message goes to the journal's native socket as one entry with PRIORITY,
// SYSLOG_IDENTIFIER, GRADSYNC_COMPONENT and, when the message names them,
// GRADSYNC_JOB ("job 'NAME'") and GRADSYNC_RANK ("rank N"), so that
// `journalctl GRADSYNC_JOB=train` selects one job.
#pragma once

#include <memory>
#include <string>

#include <spdlog/sinks/sink.h>

namespace gradsync {

// The job and rank a message names ("" when it names none).
struct LogFields {
  std::string job;
  std::string rank;
};
LogFields fieldsOf(const std::string& message);

// The journal's native-protocol sink, or null when stderr is not the journal.
// GRADSYNC_JOURNAL_SOCKET replaces the socket path (tests).
std::shared_ptr<spdlog::sinks::sink> journalSinkIfStderrIsJournal(const std::string& identifier);

}  // namespace gradsync
