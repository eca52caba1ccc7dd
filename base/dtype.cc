// SPDX-License-Identifier: Apache-2.0
#include "base/dtype.h"

namespace gradsync {

size_t elementSize(DataType dtype) {
  switch (dtype) {
    case v1::UINT8:
    case v1::INT8:
    case v1::BOOL:
      return 1;
    case v1::UINT16:
    case v1::INT16:
    case v1::FLOAT16:
    case v1::BFLOAT16:
      return 2;
    case v1::INT32:
    case v1::FLOAT32:
      return 4;
    case v1::INT64:
    case v1::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

std::string dataTypeName(DataType dtype) {
  switch (dtype) {
    case v1::UINT8:
      return "uint8";
    case v1::INT8:
      return "int8";
    case v1::UINT16:
      return "uint16";
    case v1::INT16:
      return "int16";
    case v1::INT32:
      return "int32";
    case v1::INT64:
      return "int64";
    case v1::FLOAT16:
      return "float16";
    case v1::BFLOAT16:
      return "bfloat16";
    case v1::FLOAT32:
      return "float32";
    case v1::FLOAT64:
      return "float64";
    case v1::BOOL:
      return "bool";
    default:
      return "unknown(" + std::to_string(static_cast<int>(dtype)) + ")";
  }
}

std::string reduceOpName(ReduceOp op) {
  switch (op) {
    case v1::SUM:
      return "sum";
    case v1::AVERAGE:
      return "average";
    case v1::MIN:
      return "min";
    case v1::MAX:
      return "max";
    case v1::PRODUCT:
      return "product";
    case v1::ADASUM:
      return "adasum";
    default:
      return "unknown(" + std::to_string(static_cast<int>(op)) + ")";
  }
}

std::string collectiveName(CollectiveType type) {
  switch (type) {
    case v1::ALLREDUCE:
      return "allreduce";
    case v1::ALLGATHER:
      return "allgather";
    case v1::BROADCAST:
      return "broadcast";
    case v1::ALLTOALL:
      return "alltoall";
    case v1::REDUCESCATTER:
      return "reducescatter";
    case v1::BARRIER:
      return "barrier";
    case v1::JOIN:
      return "join";
    case v1::PROCESS_SET_ADD:
      return "process set add";
    case v1::PROCESS_SET_REMOVE:
      return "process set remove";
    default:
      return "unknown(" + std::to_string(static_cast<int>(type)) + ")";
  }
}

bool changesProcessSets(CollectiveType type) { return type == v1::PROCESS_SET_ADD || type == v1::PROCESS_SET_REMOVE; }

bool isDataless(CollectiveType type) { return type == v1::BARRIER || type == v1::JOIN || changesProcessSets(type); }

bool reduceOpAllowed(DataType dtype, ReduceOp op) {
  if (elementSize(dtype) == 0) return false;
  switch (op) {
    case v1::MIN:
    case v1::MAX:
      return true;
    case v1::SUM:
    case v1::AVERAGE:
    case v1::PRODUCT:
      return dtype != v1::BOOL;
    case v1::ADASUM:
      return dtype == v1::FLOAT16 || dtype == v1::BFLOAT16 || dtype == v1::FLOAT32 || dtype == v1::FLOAT64;
    default:
      return false;
  }
}

int64_t elementCount(const std::vector<int64_t>& shape, int64_t limit) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim != 0 && count > limit / dim) return -1;
    count *= dim;
  }
  return count;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace gradsync
