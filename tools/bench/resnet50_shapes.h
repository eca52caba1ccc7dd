// SPDX-License-Identifier: Apache-2.0
// ResNet-50 parameter shapes (torchvision v1.5 layout), in registration
// order: 161 tensors, 25,557,032 float32 values (97.5 MiB). The same list as
// shared/bench/peers/resnet_allreduce.py builds by hand.
#pragma once

#include <cstdint>
#include <vector>

namespace gradsync::bench {

inline std::vector<std::vector<int64_t>> resnet50Shapes() {
  std::vector<std::vector<int64_t>> shapes;
  auto conv = [&](int64_t cin, int64_t cout, int64_t k) { shapes.push_back({cout, cin, k, k}); };
  auto bn = [&](int64_t c) {
    shapes.push_back({c});
    shapes.push_back({c});
  };
  conv(3, 64, 7);
  bn(64);
  int64_t cin = 64;
  const int64_t stages[4][2] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (const auto& stage : stages) {
    const int64_t width = stage[0];
    for (int64_t b = 0; b < stage[1]; ++b) {
      conv(cin, width, 1);
      bn(width);
      conv(width, width, 3);
      bn(width);
      conv(width, width * 4, 1);
      bn(width * 4);
      if (b == 0) {
        conv(cin, width * 4, 1);
        bn(width * 4);
      }
      cin = width * 4;
    }
  }
  shapes.push_back({1000, 2048});
  shapes.push_back({1000});
  return shapes;
}

}  // namespace gradsync::bench
