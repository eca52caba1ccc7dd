// SPDX-License-Identifier: Apache-2.0
// The daemon's configuration: file (protobuf text or JSON), then flags, then
// defaults and validation.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/gradsync/v1/config.pb.h"

namespace gradsync::exe {

struct Options {
  v1::DaemonConfig config;
  std::string config_path;
  bool check_config = false;  // validate, print the result and exit
  bool show_version = false;
  bool show_help = false;
};

// Reads a DaemonConfig from `path`: JSON when the file starts with '{',
// protobuf text format otherwise. Errors name the file, line and column.
StatusOr<v1::DaemonConfig> loadConfigFile(const std::string& path);
// The same from the file's `content`; `origin` names it in errors.
StatusOr<v1::DaemonConfig> parseConfig(const std::string& content, const std::string& origin);

// Parses the command line (--flag=value or --flag value); loads
// --config-path first, then applies the other flags over it, then fills
// defaults and validates.
StatusOr<Options> parseOptions(const std::vector<std::string>& args);

// Fills defaults for zero fields and checks ranges.
Status applyDefaultsAndValidate(v1::DaemonConfig* config);

std::string usage();

}  // namespace gradsync::exe
