// Enumerations shared by every layer. Integer values are part of the C API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mxplugin {

enum class DataType : int32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kFloat32 = 5,
  kFloat64 = 6,
  kBFloat16 = 7,
};
constexpr int kNumDataTypes = 8;

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,  // turned into kSum with postscale / size at enqueue
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};

enum class OpType : int32_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
};

constexpr int kCpuDevice = -1;

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* OpTypeName(OpType op);
bool IsValidDataType(int32_t v);
bool IsFloatingPoint(DataType dtype);
std::string DeviceName(int device);

}  // namespace mxplugin
