// Compiled against MXNet's C++ headers, like engine_op.cc.
#include "mxnet/plain_data.h"

#include <cstring>
#include <string>

#include "common/status.h"

namespace mxplugin {
namespace mxnet_adapter {

namespace {

std::string DTypeName(int dtype) {
  switch (dtype) {
    case mshadow::kFloat32: return "float32";
    case mshadow::kFloat64: return "float64";
    case mshadow::kFloat16: return "float16";
    case mshadow::kBfloat16: return "bfloat16";
    case mshadow::kUint8: return "uint8";
    case mshadow::kInt8: return "int8";
    case mshadow::kInt32: return "int32";
    case mshadow::kInt64: return "int64";
  }
  return "code " + std::to_string(dtype);
}

}  // namespace

const ::mxnet::NDArray& PlainFloat32Array(void* handle, const std::string& what, const std::string& takers,
                                          const std::string& role) {
  auto invalid = [&](const std::string& why) { throw Error(Status::InvalidArgument(what + ": " + role + why)); };
  if (handle == nullptr) invalid(" is null");
  const auto& array = *static_cast<const ::mxnet::NDArray*>(handle);
  if (array.is_none()) invalid(" is an empty NDArray");
  if (array.storage_type() != ::mxnet::kDefaultStorage) {
    invalid(" has sparse storage; " + takers + " take default (dense) storage only");
  }
  if (array.dtype() != mshadow::kFloat32) {
    invalid(" has dtype " + DTypeName(array.dtype()) + "; " + takers +
            " take float32 only (cast the array, or use the MXNet op)");
  }
  if (array.ctx().dev_mask() != ::mxnet::Context::kCPU) {
    invalid(std::string(" is on ") + (array.ctx().dev_type == ::mxnet::Context::kGPU ? "a GPU" : "a non-CPU device") +
            "; " + takers + " run on CPU arrays only");
  }
  if (!::mxnet::shape_is_known(array.shape())) invalid(" has an unknown shape");
  return array;
}

float* ReadableData(::mxnet::NDArray& array, std::vector<::mxnet::NDArray>* staged) {
  if (array.IsMKLDNNData()) {
    staged->push_back(array.Reorder2Default());
    return static_cast<float*>(staged->back().data().dptr_);
  }
  return static_cast<float*>(array.data().dptr_);
}

float* WritableData(::mxnet::NDArray& array) {
  if (array.IsMKLDNNData()) {
    ::mxnet::NDArray plain = array.Reorder2Default();
    array.InvalidateMKLDNNData();
    std::memcpy(array.data().dptr_, plain.data().dptr_, array.shape().Size() * sizeof(float));
  }
  return static_cast<float*>(array.data().dptr_);
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
