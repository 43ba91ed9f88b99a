// Compiled against MXNet's C++ headers, like engine_op.cc.
#include "mxnet/array_types.h"

#include <mshadow/base.h>

namespace mxplugin {
namespace mxnet_adapter {

bool DataTypeOfArray(int type_flag, DataType* out, std::string* name) {
  switch (type_flag) {
    case mshadow::kFloat32: *out = DataType::kFloat32; return true;
    case mshadow::kFloat64: *out = DataType::kFloat64; return true;
    case mshadow::kFloat16: *out = DataType::kFloat16; return true;
    case mshadow::kUint8: *out = DataType::kUInt8; return true;
    case mshadow::kInt32: *out = DataType::kInt32; return true;
    case mshadow::kInt8: *out = DataType::kInt8; return true;
    case mshadow::kInt64: *out = DataType::kInt64; return true;
    case mshadow::kBool: *name = "bool"; return false;
    case mshadow::kInt16: *name = "int16"; return false;
    case mshadow::kUint16: *name = "uint16"; return false;
    case mshadow::kUint32: *name = "uint32"; return false;
    case mshadow::kUint64: *name = "uint64"; return false;
    case mshadow::kBfloat16: *out = DataType::kBFloat16; return true;
    default: *name = "type flag " + std::to_string(type_flag); return false;
  }
}

std::string SupportedArrayTypes() {
  std::string text, unused;
  DataType dtype;
  for (int flag = 0; flag <= mshadow::kBfloat16; ++flag) {
    if (DataTypeOfArray(flag, &dtype, &unused)) text += (text.empty() ? "" : ", ") + std::string(DataTypeName(dtype));
  }
  return text;
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
