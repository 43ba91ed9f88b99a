// Compiled against MXNet's C++ headers, like engine_op.cc.
#include "mxnet/optimizer_op.h"

#include <mxnet/c_api.h>
#include <mxnet/engine.h>
#include <mxnet/ndarray.h>

#include <cstring>
#include <memory>
#include <string>

#include "common/status.h"

namespace mxplugin {
namespace mxnet_adapter {
namespace {

struct OptimizerOp {
  optim::OptimizerParams params;
  std::vector<int64_t> offsets;
  // Copies sharing storage with the caller's arrays: they keep it alive
  // until the op has run, even if Python drops its objects.
  ::mxnet::NDArray weight, grad;
  std::vector<::mxnet::NDArray> states;
};

// See Note [oneDNN layouts] in engine_op.cc. An array the update reads is
// read through a default-layout copy; one it also writes is first rewritten
// in default layout in place, so the update sees its current values.
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

// Runs on an engine worker once all dependencies are ready.
void Run(void* /*run_context*/, void* on_complete_ptr, void* param) {
  // Copy the completion object now: the engine's one dies when we return.
  ::mxnet::engine::CallbackOnComplete on_complete =
      *static_cast<::mxnet::engine::CallbackOnComplete*>(on_complete_ptr);
  auto* op = static_cast<OptimizerOp*>(param);
  try {
    std::vector<::mxnet::NDArray> staged;
    optim::FlatBuffers b;
    b.grad = ReadableData(op->grad, &staged);
    b.weight = WritableData(op->weight);
    b.num_states = static_cast<int>(op->states.size());
    for (int s = 0; s < b.num_states; ++s) b.states[s] = WritableData(op->states[s]);
    b.size = static_cast<int64_t>(op->weight.shape().Size());
    if (!op->offsets.empty()) {
      b.offsets = op->offsets.data();
      b.num_segments = static_cast<int64_t>(op->offsets.size()) - 1;
    }
    optim::CheckUpdate(op->params, b);
    optim::ApplyUpdate(op->params, b);
    on_complete();
  } catch (const Error& e) {
    dmlc::Error error(e.status().reason());
    on_complete(&error);
  } catch (const std::exception& e) {
    dmlc::Error error(std::string("mxplugin: ") + e.what());
    on_complete(&error);
  }
}

void Delete(void* param) { delete static_cast<OptimizerOp*>(param); }

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

[[noreturn]] void Invalid(const optim::OptimizerParams& params, const std::string& what) {
  throw Error(Status::InvalidArgument(std::string("fused ") + optim::OptimizerName(optim::KindOf(params)) +
                                      ": " + what));
}

const ::mxnet::NDArray& ArrayOf(const optim::OptimizerParams& params, void* handle, const std::string& role) {
  if (handle == nullptr) Invalid(params, role + " is null");
  const auto& array = *static_cast<const ::mxnet::NDArray*>(handle);
  if (array.is_none()) Invalid(params, role + " is an empty NDArray");
  if (array.storage_type() != ::mxnet::kDefaultStorage) {
    Invalid(params, role + " has sparse storage; fused updates take default (dense) storage only");
  }
  if (array.dtype() != mshadow::kFloat32) {
    Invalid(params, role + " has dtype " + DTypeName(array.dtype()) +
                        "; fused updates take float32 only (cast the array, or use the MXNet op)");
  }
  if (array.ctx().dev_mask() != ::mxnet::Context::kCPU) {
    Invalid(params, role + " is on " + (array.ctx().dev_type == ::mxnet::Context::kGPU ? "a GPU" : "a non-CPU device") +
                        "; fused updates run on CPU arrays only");
  }
  if (!::mxnet::shape_is_known(array.shape())) Invalid(params, role + " has an unknown shape");
  return array;
}

}  // namespace

void PushOptimizerUpdate(const optim::OptimizerParams& params, const OptimizerArrays& arrays,
                         std::vector<int64_t> offsets, int priority) {
  auto op = std::make_unique<OptimizerOp>();
  op->params = params;
  op->weight = ArrayOf(params, arrays.weight, "weight");
  op->grad = ArrayOf(params, arrays.grad, "grad");
  for (size_t s = 0; s < arrays.states.size(); ++s) {
    op->states.push_back(ArrayOf(params, arrays.states[s], "state " + std::to_string(s)));
  }

  const int64_t size = static_cast<int64_t>(op->weight.shape().Size());
  std::vector<std::pair<std::string, const ::mxnet::NDArray*>> all = {{"weight", &op->weight}, {"grad", &op->grad}};
  for (size_t s = 0; s < op->states.size(); ++s) all.emplace_back("state " + std::to_string(s), &op->states[s]);
  for (size_t x = 0; x < all.size(); ++x) {
    const int64_t n = static_cast<int64_t>(all[x].second->shape().Size());
    if (n != size) {
      Invalid(params, all[x].first + " has " + std::to_string(n) + " elements but weight has " + std::to_string(size));
    }
    // One engine variable per array chunk: views of one array would make the
    // engine see a duplicate dependency (and could overlap).
    for (size_t y = 0; y < x; ++y) {
      if (all[x].second->var() == all[y].second->var()) {
        Invalid(params, all[y].first + " and " + all[x].first + " are the same NDArray or views of one");
      }
    }
  }

  optim::FlatBuffers layout;
  layout.num_states = static_cast<int>(op->states.size());
  layout.size = size;
  if (!offsets.empty()) {
    layout.offsets = offsets.data();
    layout.num_segments = static_cast<int64_t>(offsets.size()) - 1;
  }
  optim::CheckArguments(params, layout);
  op->offsets = std::move(offsets);

  std::vector<NDArrayHandle> reads = {&op->grad};
  std::vector<NDArrayHandle> writes = {&op->weight};
  for (auto& state : op->states) writes.push_back(&state);
  ::mxnet::Context ctx = op->weight.ctx();
  OptimizerOp* raw = op.release();
  int rc = MXEnginePushAsyncND(&Run, raw, &Delete, &ctx, reads.data(), static_cast<int>(reads.size()),
                               writes.data(), static_cast<int>(writes.size()), nullptr, priority,
                               "mxplugin_fused_update", false);
  if (rc != 0) {
    throw Error(Status::Internal(std::string("MXEnginePushAsyncND failed: ") + MXGetLastError()));
  }
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
