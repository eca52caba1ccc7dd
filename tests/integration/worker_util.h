// SPDX-License-Identifier: Apache-2.0
// Helpers for the integration-test worker: typed buffers, reference values,
// checks that report the rank and what differs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "daemon/collective/reduce/half.h"
#include "gradsync/gradsync.hpp"

namespace gradsync::worker {

inline int g_rank = -1;

#define WORKER_CHECK(cond, ...)                                                                         \
  do {                                                                                                  \
    if (!(cond)) {                                                                                      \
      std::fprintf(stderr, "[rank %d] CHECK failed at %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                                \
      std::fprintf(stderr, "\n");                                                                       \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)

#define WORKER_OK(expr)                                                              \
  do {                                                                               \
    ::gradsync::Result r_ = (expr);                                                  \
    WORKER_CHECK(r_.ok(), "%s returned %d: %s", #expr, r_.code, r_.message.c_str()); \
  } while (0)

inline size_t dtypeSize(int dtype) {
  switch (dtype) {
    case GRADSYNC_UINT8:
    case GRADSYNC_INT8:
    case GRADSYNC_BOOL:
      return 1;
    case GRADSYNC_UINT16:
    case GRADSYNC_INT16:
    case GRADSYNC_FLOAT16:
    case GRADSYNC_BFLOAT16:
      return 2;
    case GRADSYNC_INT32:
    case GRADSYNC_FLOAT32:
      return 4;
    default:
      return 8;
  }
}

inline bool isFloat(int dtype) {
  return dtype == GRADSYNC_FLOAT16 || dtype == GRADSYNC_BFLOAT16 || dtype == GRADSYNC_FLOAT32 ||
         dtype == GRADSYNC_FLOAT64;
}

// Stores `v` as element `i` of a buffer of `dtype`.
inline void store(int dtype, void* buf, size_t i, double v) {
  switch (dtype) {
    case GRADSYNC_UINT8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case GRADSYNC_INT8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case GRADSYNC_UINT16:
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v);
      break;
    case GRADSYNC_INT16:
      static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v);
      break;
    case GRADSYNC_INT32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case GRADSYNC_INT64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case GRADSYNC_FLOAT16:
      static_cast<uint16_t*>(buf)[i] = reduce::floatToHalf(static_cast<float>(v));
      break;
    case GRADSYNC_BFLOAT16:
      static_cast<uint16_t*>(buf)[i] = reduce::floatToBfloat16(static_cast<float>(v));
      break;
    case GRADSYNC_FLOAT32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case GRADSYNC_FLOAT64:
      static_cast<double*>(buf)[i] = v;
      break;
    case GRADSYNC_BOOL:
      static_cast<uint8_t*>(buf)[i] = v != 0;
      break;
  }
}

inline double load(int dtype, const void* buf, size_t i) {
  switch (dtype) {
    case GRADSYNC_UINT8:
      return static_cast<const uint8_t*>(buf)[i];
    case GRADSYNC_INT8:
      return static_cast<const int8_t*>(buf)[i];
    case GRADSYNC_UINT16:
      return static_cast<const uint16_t*>(buf)[i];
    case GRADSYNC_INT16:
      return static_cast<const int16_t*>(buf)[i];
    case GRADSYNC_INT32:
      return static_cast<const int32_t*>(buf)[i];
    case GRADSYNC_INT64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case GRADSYNC_FLOAT16:
      return reduce::halfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case GRADSYNC_BFLOAT16:
      return reduce::bfloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case GRADSYNC_FLOAT32:
      return static_cast<const float*>(buf)[i];
    case GRADSYNC_FLOAT64:
      return static_cast<const double*>(buf)[i];
    case GRADSYNC_BOOL:
      return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

// One step of reduction `op` over values as doubles (AVERAGE sums here;
// averaged() divides at the end).
inline double combine(int op, double acc, double v) {
  switch (op) {
    case GRADSYNC_MIN:
      return std::min(acc, v);
    case GRADSYNC_MAX:
      return std::max(acc, v);
    case GRADSYNC_PRODUCT:
      return acc * v;
    default:
      return acc + v;
  }
}

// AVERAGE's end: the sum over `members`, truncated toward zero for integers.
inline double averaged(int dtype, double sum, int members) {
  return isFloat(dtype) ? sum / members : std::trunc(sum / members);
}

inline gradsync_op_t makeOp(int collective, const char* name, void* data, int dtype,
                            const std::vector<int64_t>& shape) {
  gradsync_op_t op;
  gradsync_op_init(&op);
  op.collective = collective;
  op.name = name;
  op.data = data;
  op.dtype = dtype;
  op.ndim = static_cast<int32_t>(shape.size());
  op.shape = shape.data();
  return op;
}

using Scenario = int (*)(Client&, const std::vector<std::string>&);
// Scenarios about process sets, join, errors and failures (worker_faults.cc).
const std::map<std::string, Scenario>& moreScenarios();
// CUDA tensors through the fake CUDA driver of tests/fakegpu (worker_cuda.cc).
int fakeCuda(Client& c, const std::vector<std::string>& args);
int fakeCudaAcross(Client& c, const std::vector<std::string>& args);
int fakeCudaGpus(Client& c, const std::vector<std::string>& args);
int fakeCudaSets(Client& c, const std::vector<std::string>& args);
int fakeCudaLead(Client& c, const std::vector<std::string>& args);
int fakeCudaAdasum(Client& c, const std::vector<std::string>& args);
int fakeCudaExchange(Client& c, const std::vector<std::string>& args);
int fakeCudaKill(Client& c, const std::vector<std::string>& args);
int fakeCudaHold(Client& c, const std::vector<std::string>& args);
// `bytes` of the fake driver's device memory on GPU (local rank % gpus);
// null without the driver.
uint8_t* fakeDeviceMemory(const Client& c, int gpus, size_t bytes);
// A sharded-data-parallel loop (worker_sharded.cc).
int shardedStepsScenario(Client& c, const std::vector<std::string>& args);
// Collectives of several kinds and groups in flight together
// (worker_compose.cc).
int composedScenario(Client& c, const std::vector<std::string>& args);
// A random program of collectives from a seed, with or without a fault
// (worker_random.cc).
int randomScenario(Client& c, const std::vector<std::string>& args);
// Elastic jobs across daemons (worker_elastic.cc).
const std::map<std::string, Scenario>& elasticScenarios();

}  // namespace gradsync::worker
