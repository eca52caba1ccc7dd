// SPDX-License-Identifier: Apache-2.0
// Runs a fuzz target's LLVMFuzzerTestOneInput over every file of the
// directories given as arguments (its seed corpus and the inputs that once
// crashed it), without libFuzzer: the regression test of each target, built
// by the normal toolchain and run in CI (and under --config=asan).
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  int inputs = 0;
  for (int i = 1; i < argc; ++i) {
    DIR* dir = ::opendir(argv[i]);
    if (dir == nullptr) {
      std::fprintf(stderr, "cannot open %s\n", argv[i]);
      return 1;
    }
    while (dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const std::string path = std::string(argv[i]) + "/" + entry->d_name;
      std::ifstream in(path, std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string input = bytes.str();
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
      ++inputs;
    }
    ::closedir(dir);
  }
  std::printf("replayed %d inputs\n", inputs);
  return inputs > 0 ? 0 : 1;
}
