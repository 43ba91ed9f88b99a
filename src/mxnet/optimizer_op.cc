// Compiled against MXNet's C++ headers, like engine_op.cc.
#include "mxnet/optimizer_op.h"

#include <mxnet/c_api.h>
#include <mxnet/engine.h>
#include <mxnet/ndarray.h>

#include <memory>

#include "mxnet/engine_push.h"
#include "mxnet/plain_data.h"
#include <string>

#include "common/status.h"

namespace mxplugin {
namespace mxnet_adapter {
namespace {

struct OptimizerOp {
  optim::OptimizerParams params;
  std::vector<int64_t> offsets;
  std::vector<::mxnet::NDArray> weights;  // multi-weight updates: one per segment
  // Copies sharing storage with the caller's arrays: they keep it alive
  // until the op has run, even if Python drops its objects.
  ::mxnet::NDArray weight, grad;
  std::vector<::mxnet::NDArray> states;
};

void RunSegments(OptimizerOp* op, std::vector<::mxnet::NDArray>* staged) {
  float* flat_grad = ReadableData(op->grad, staged);
  float* states[optim::kMaxStates] = {};
  for (size_t s = 0; s < op->states.size(); ++s) states[s] = WritableData(op->states[s]);
  for (size_t i = 0; i < op->weights.size(); ++i) {
    const int64_t begin = op->offsets[i], n = op->offsets[i + 1] - begin;
    const int64_t local[2] = {0, n};
    optim::FlatBuffers b;
    b.weight = WritableData(op->weights[i]);
    b.grad = flat_grad + begin;
    b.num_states = static_cast<int>(op->states.size());
    for (int s = 0; s < b.num_states; ++s) b.states[s] = states[s] + begin;
    b.size = n;
    b.offsets = local;
    b.num_segments = 1;
    optim::CheckUpdate(op->params, b);
    optim::ApplyUpdate(op->params, b);
  }
}

// Runs on an engine worker once all dependencies are ready.
void Run(void* /*run_context*/, void* on_complete_ptr, void* param) {
  // Copy the completion object now: the engine's one dies when we return.
  ::mxnet::engine::CallbackOnComplete on_complete =
      *static_cast<::mxnet::engine::CallbackOnComplete*>(on_complete_ptr);
  auto* op = static_cast<OptimizerOp*>(param);
  try {
    std::vector<::mxnet::NDArray> staged;
    if (!op->weights.empty()) {
      RunSegments(op, &staged);
      on_complete();
      return;
    }
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
    Complete(on_complete, e.status());
  } catch (const std::exception& e) {
    Complete(on_complete, Status::Internal(std::string("mxplugin: ") + e.what()));
  }
}

void Delete(void* param) { delete static_cast<OptimizerOp*>(param); }

const ::mxnet::NDArray& ArrayOf(const optim::OptimizerParams& params, void* handle, const std::string& role) {
  return PlainFloat32Array(handle, std::string("fused ") + optim::OptimizerName(optim::KindOf(params)),
                           "fused updates", role);
}

[[noreturn]] void Invalid(const optim::OptimizerParams& params, const std::string& what) {
  throw Error(Status::InvalidArgument(std::string("fused ") + optim::OptimizerName(optim::KindOf(params)) +
                                      ": " + what));
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
  const ::mxnet::Context ctx = op->weight.ctx();
  PushAsync(&Run, op.release(), &Delete, ctx, std::move(reads), std::move(writes), priority, "mxplugin_fused_update");
}

void PushMultiWeightUpdate(const optim::OptimizerParams& params, const std::vector<void*>& weights, void* grad,
                           const std::vector<void*>& states, std::vector<int64_t> offsets, int priority) {
  if (weights.empty() || offsets.size() != weights.size() + 1 || offsets.front() != 0) {
    Invalid(params, "a multi-weight update needs one weight per segment and offsets [0, ..., size]");
  }
  auto op = std::make_unique<OptimizerOp>();
  op->params = params;
  op->grad = ArrayOf(params, grad, "grad");
  const int64_t size = static_cast<int64_t>(op->grad.shape().Size());
  if (offsets.back() != size) {
    Invalid(params, "segments cover " + std::to_string(offsets.back()) + " elements but grad has " +
                        std::to_string(size));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    op->weights.push_back(ArrayOf(params, weights[i], "weight " + std::to_string(i)));
    const int64_t n = static_cast<int64_t>(op->weights.back().shape().Size());
    if (n != offsets[i + 1] - offsets[i]) {
      Invalid(params, "weight " + std::to_string(i) + " has " + std::to_string(n) + " elements, its segment " +
                          std::to_string(offsets[i + 1] - offsets[i]));
    }
  }
  for (size_t s = 0; s < states.size(); ++s) {
    op->states.push_back(ArrayOf(params, states[s], "state " + std::to_string(s)));
    if (static_cast<int64_t>(op->states.back().shape().Size()) != size) {
      Invalid(params, "state " + std::to_string(s) + " does not have the grad's size");
    }
  }
  optim::FlatBuffers layout;
  layout.num_states = static_cast<int>(states.size());
  layout.size = size;
  layout.offsets = offsets.data();
  layout.num_segments = static_cast<int64_t>(offsets.size()) - 1;
  optim::CheckArguments(params, layout);
  op->offsets = std::move(offsets);

  std::vector<NDArrayHandle> reads = {&op->grad};
  std::vector<NDArrayHandle> writes;
  std::vector<::mxnet::Engine::VarHandle> vars = {op->grad.var()};
  auto add_write = [&](::mxnet::NDArray* a, const std::string& role) {
    for (auto v : vars) {
      if (v == a->var()) Invalid(params, role + " shares storage with another array of the update");
    }
    vars.push_back(a->var());
    writes.push_back(a);
  };
  for (size_t i = 0; i < op->weights.size(); ++i) add_write(&op->weights[i], "weight " + std::to_string(i));
  for (size_t s = 0; s < op->states.size(); ++s) add_write(&op->states[s], "state " + std::to_string(s));
  const ::mxnet::Context ctx = op->grad.ctx();
  PushAsync(&Run, op.release(), &Delete, ctx, std::move(reads), std::move(writes), priority, "mxplugin_fused_update");
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
