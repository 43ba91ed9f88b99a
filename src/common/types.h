// Enumerations shared by every layer. Their values are the C codes of
// common/codes.h (part of the C API), defined there once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/codes.h"

namespace mxplugin {

enum class DataType : int32_t {
  kUInt8 = MXP_DTYPE_UINT8,
  kInt8 = MXP_DTYPE_INT8,
  kInt32 = MXP_DTYPE_INT32,
  kInt64 = MXP_DTYPE_INT64,
  kFloat16 = MXP_DTYPE_FLOAT16,
  kFloat32 = MXP_DTYPE_FLOAT32,
  kFloat64 = MXP_DTYPE_FLOAT64,
  kBFloat16 = MXP_DTYPE_BFLOAT16,
};
constexpr int kNumDataTypes = MXP_NUM_DTYPES;

enum class ReduceOp : int32_t {
  kSum = MXP_REDUCE_SUM,
  kAverage = MXP_REDUCE_AVERAGE,  // turned into kSum with postscale / size at enqueue
  kMin = MXP_REDUCE_MIN,
  kMax = MXP_REDUCE_MAX,
  kProduct = MXP_REDUCE_PRODUCT,
};

enum class OpType : int32_t {
  kAllreduce = MXP_OP_ALLREDUCE,
  kAllgather = MXP_OP_ALLGATHER,
  kBroadcast = MXP_OP_BROADCAST,
  kAlltoall = MXP_OP_ALLTOALL,
  kReducescatter = MXP_OP_REDUCESCATTER,
  kBarrier = MXP_OP_BARRIER,
  kRefusal = MXP_OP_REFUSAL,
  kJoin = MXP_OP_JOIN,
};

constexpr int kCpuDevice = MXP_CPU_DEVICE;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType op);
bool IsValidDataType(int32_t v);
bool IsFloatingPoint(DataType dtype);
std::string DeviceName(int device);

}  // namespace mxplugin
