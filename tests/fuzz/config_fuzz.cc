// SPDX-License-Identifier: Apache-2.0
// gradsyncd's config file (protobuf text format or JSON), then the defaults
// and checks applied to it: any content is refused with a message or gives
// a config that passes the checks.
#include "daemon/exe/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradsync;
  auto config = exe::parseConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz input");
  if (config.isOk()) (void)exe::applyDefaultsAndValidate(&config.value());
  return 0;
}
