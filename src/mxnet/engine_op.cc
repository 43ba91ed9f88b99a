// Compiled against MXNet's C++ headers (old C++ ABI, oneDNN on, as the
// mxnet==1.9.1 wheel was built): setup.py sets the flags for the whole extension.
#include "mxnet/engine_op.h"

#include <mxnet/c_api.h>
#include <mxnet/engine.h>
#include <mxnet/ndarray.h>

#include <algorithm>
#include <memory>

#include "mxnet/engine_push.h"

namespace mxplugin {
namespace mxnet_adapter {
namespace {

struct EngineOp {
  Core* core = nullptr;
  int process_set_id = 0;
  std::vector<TensorOp> ops;
  // Copies of the caller's NDArrays: they share storage with them and keep
  // it alive until the engine op completes, even if Python drops its objects.
  std::vector<::mxnet::NDArray> inputs;
  std::vector<::mxnet::NDArray> outputs;
  // Default-layout copies of inputs that oneDNN keeps in a blocked layout.
  std::vector<::mxnet::NDArray> staged;
};

void* DataOf(::mxnet::NDArray& array) { return array.data().dptr_; }

// Runs on an engine worker once all dependencies are ready.
void Run(void* /*run_context*/, void* on_complete_ptr, void* param) {
  // Copy the completion object now: the engine's one dies when we return.
  ::mxnet::engine::CallbackOnComplete on_complete =
      *static_cast<::mxnet::engine::CallbackOnComplete*>(on_complete_ptr);
  auto* op = static_cast<EngineOp*>(param);
  try {
    std::vector<TensorOp> ops = op->ops;
    // Note [oneDNN layouts]: oneDNN may keep an array (e.g. conv weights after
    // an inference forward) in a blocked layout. Read such inputs through a
    // default-layout copy; mark such outputs as default layout (we overwrite
    // them entirely). Inputs first: in place, input and output share storage.
    op->staged.reserve(op->inputs.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      ::mxnet::NDArray& in = op->inputs[i];
      if (in.IsMKLDNNData()) {
        op->staged.push_back(in.Reorder2Default());
        ops[i].input.data = DataOf(op->staged.back());
      } else {
        ops[i].input.data = DataOf(in);
      }
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      ::mxnet::NDArray& out = op->outputs[i];
      if (out.IsMKLDNNData()) out.InvalidateMKLDNNData();
      ops[i].output.data = DataOf(out);
    }
    op->core->Enqueue(op->process_set_id, std::move(ops), [on_complete](const Status& status) { Complete(on_complete, status); });
  } catch (const Error& e) {
    Complete(on_complete, e.status());
  } catch (const std::exception& e) {
    Complete(on_complete, Status::Internal(std::string("mxplugin: ") + e.what()));
  }
}

void Delete(void* param) { delete static_cast<EngineOp*>(param); }

}  // namespace

void PushCollective(Core* core, int process_set_id, std::vector<TensorOp> ops,
                    const std::vector<void*>& inputs, const std::vector<void*>& outputs, int priority) {
  for (size_t i = 0; i < ops.size(); ++i) {
    for (void* handle : {inputs[i], outputs[i]}) {
      const auto* array = static_cast<const ::mxnet::NDArray*>(handle);
      if (array->storage_type() != ::mxnet::kDefaultStorage) {
        throw Error(Status::InvalidArgument(std::string(OpTypeName(ops[i].meta.op)) + " '" + ops[i].meta.name +
                                            "': sparse NDArrays are not supported; use tostype('default')"));
      }
      if (array->ctx().dev_mask() != ::mxnet::Context::kCPU) {
        ops[i].meta.device = array->ctx().dev_id;  // Core::Check decides whether GPU tensors can run
      }
    }
    ops[i].input.device = ops[i].output.device = ops[i].meta.device;
  }
  core->Check(process_set_id, ops);
  auto op = std::make_unique<EngineOp>();
  op->core = core;
  op->process_set_id = process_set_id;
  std::vector<NDArrayHandle> reads, writes;
  std::vector<::mxnet::Engine::VarHandle> write_vars;
  for (size_t i = 0; i < ops.size(); ++i) {
    auto* out = static_cast<::mxnet::NDArray*>(outputs[i]);
    op->outputs.push_back(*out);
    // Views of one array share an engine variable; the engine wants it once.
    if (std::find(write_vars.begin(), write_vars.end(), out->var()) != write_vars.end()) continue;
    writes.push_back(outputs[i]);
    write_vars.push_back(out->var());
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    auto* in = static_cast<::mxnet::NDArray*>(inputs[i]);
    op->inputs.push_back(*in);
    // The engine wants read and write sets disjoint: an in-place tensor is a write only.
    bool written = false;
    for (auto v : write_vars) written = written || v == in->var();
    bool seen = false;
    for (auto h : reads) seen = seen || static_cast<::mxnet::NDArray*>(h)->var() == in->var();
    if (!written && !seen) reads.push_back(inputs[i]);
  }
  op->ops = std::move(ops);
  const ::mxnet::Context ctx = op->outputs.empty() ? ::mxnet::Context::CPU() : op->outputs[0].ctx();
  PushAsync(&Run, op.release(), &Delete, ctx, std::move(reads), std::move(writes), priority, "mxplugin_collective");
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
