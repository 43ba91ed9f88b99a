// Float32 data of NDArrays in MXNet's default (row-major) layout, for the
// engine ops that run mxplugin's own CPU kernels on them (the fused
// updates, PowerSGD's passes). Called on the engine thread, inside the op.
#pragma once

#include <mxnet/ndarray.h>

#include <string>
#include <vector>

namespace mxplugin {
namespace mxnet_adapter {

// See Note [oneDNN layouts] in engine_op.cc. An array the kernel only reads
// is read through a default-layout copy, kept alive in `staged`; one it
// also writes is first rewritten in default layout in place, so the kernel
// sees its current values and its result is what MXNet reads afterwards.
// The NDArray behind `handle` when it is a float32 dense CPU array of known
// shape; else throws Error(InvalidArgument) "<what>: <role> has dtype
// float16; <takers> take float32 only", and so on.
const ::mxnet::NDArray& PlainFloat32Array(void* handle, const std::string& what, const std::string& takers,
                                          const std::string& role);

float* ReadableData(::mxnet::NDArray& array, std::vector<::mxnet::NDArray>* staged);
float* WritableData(::mxnet::NDArray& array);

}  // namespace mxnet_adapter
}  // namespace mxplugin
