// The core's dtype of an MXNet array, for the adapters that read dtypes
// from the arrays themselves (engine ops, the host exchange).
#pragma once

#include <string>

#include "common/types.h"

namespace mxplugin {
namespace mxnet_adapter {

// The core's dtype of an NDArray's mshadow type flag; false for a type the
// binding does not take either (bool, int16 and the 16/32/64-bit unsigned
// ones), with its MXNet name in `name`. bfloat16 is taken: MXNet 1.9.1 casts
// to it on CPU, and Compression.bf16 sends gradients in it.
bool DataTypeOfArray(int type_flag, DataType* out, std::string* name);

// "float32, float64, ...": the dtypes DataTypeOfArray takes, for messages.
std::string SupportedArrayTypes();

}  // namespace mxnet_adapter
}  // namespace mxplugin
