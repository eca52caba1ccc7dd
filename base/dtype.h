// SPDX-License-Identifier: Apache-2.0
// Facts about data types, reduce ops and collective types of the protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/gradsync/v1/types.pb.h"

namespace gradsync {

using v1::CollectiveType;
using v1::DataType;
using v1::ReduceOp;

// Bytes per element; 0 for DATA_TYPE_UNSPECIFIED or an unknown value.
size_t elementSize(DataType dtype);
// "float32", "bfloat16", ...; "unknown(N)" for values outside the enum.
std::string dataTypeName(DataType dtype);
std::string reduceOpName(ReduceOp op);
std::string collectiveName(CollectiveType type);
// Collectives that carry no tensor (barrier, join, process set changes).
bool isDataless(CollectiveType type);
// PROCESS_SET_ADD and PROCESS_SET_REMOVE.
bool changesProcessSets(CollectiveType type);
// Whether `op` may be applied to `dtype` (BOOL only with MIN and MAX).
bool reduceOpAllowed(DataType dtype, ReduceOp op);

// Product of dims, or -1 when a dim is negative or the product overflows
// `limit` elements.
int64_t elementCount(const std::vector<int64_t>& shape, int64_t limit);
std::string shapeString(const std::vector<int64_t>& shape);

}  // namespace gradsync
