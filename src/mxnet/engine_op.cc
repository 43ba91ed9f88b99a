// Compiled against MXNet's C++ headers (old C++ ABI, oneDNN on, as the
// mxnet==1.9.1 wheel was built): setup.py sets the flags for the whole extension.
#include "mxnet/engine_op.h"

#include <mxnet/c_api.h>
#include <mxnet/engine.h>
#include <mxnet/ndarray.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include "mxnet/array_types.h"
#include "mxnet/engine_push.h"

namespace mxplugin {
namespace mxnet_adapter {
namespace {

struct EngineOp {
  Core* core = nullptr;
  int process_set_id = 0;
  std::vector<TensorOp> ops;
  int device = kCpuDevice;  // of every tensor of the group
  uint64_t pushed_at = 0;   // Core::StampPush() when pushed (Note [Diverged pushes] in core/diverged_pushes.cc)
  // Copies of the caller's NDArrays: they share storage with them and keep
  // it alive until the engine op completes, even if Python drops its objects.
  std::vector<::mxnet::NDArray> inputs;
  std::vector<::mxnet::NDArray> outputs;
  // Default-layout copies of inputs that oneDNN keeps in a blocked layout.
  std::vector<::mxnet::NDArray> staged;
};

void* DataOf(::mxnet::NDArray& array) { return array.data().dptr_; }

// The device mxplugin sees: the CUDA device id of a GPU array, kCpuDevice for
// every host context (cpu, cpu_pinned, cpu_shared).
int DeviceOf(const ::mxnet::Context& ctx) {
  return ctx.dev_mask() == ::mxnet::Context::kGPU ? ctx.dev_id : kCpuDevice;
}

// MXNet's name of a context, as Python prints it.
std::string ContextName(const ::mxnet::Context& ctx) {
  switch (ctx.dev_type) {
    case ::mxnet::Context::kGPU: return "gpu(" + std::to_string(ctx.dev_id) + ")";
    case ::mxnet::Context::kCPUPinned: return "cpu_pinned(" + std::to_string(ctx.dev_id) + ")";
    case ::mxnet::Context::kCPUShared: return "cpu_shared(" + std::to_string(ctx.dev_id) + ")";
    default: return "cpu(" + std::to_string(ctx.dev_id) + ")";
  }
}

// Fills the dtype and shapes of `op` from its input array (MXP_DTYPE_OF_ARRAY).
void DescribeFromArray(TensorOp* op, const ::mxnet::NDArray& in, const ::mxnet::NDArray& out,
                       const std::string& who) {
  std::string type_name;
  if (!DataTypeOfArray(in.dtype(), &op->meta.dtype, &type_name)) {
    throw Error(Status::WrongType(who + ": dtype " + type_name + " is not supported (use one of " +
                                  SupportedArrayTypes() + ")"));
  }
  const ::mxnet::TShape& shape = in.shape();
  op->meta.shape.assign(shape.begin(), shape.end());
  op->input.shape = op->output.shape = op->meta.shape;
  op->input.dtype = op->output.dtype = op->meta.dtype;
  if (op->meta.op == OpType::kReducescatter) {  // its block of the rows: ReducescatterCounts checks the size
    op->output.shape.assign(out.shape().begin(), out.shape().end());
  } else if (out.shape() != shape) {
    std::ostringstream text;
    text << who << ": output shape " << out.shape() << " differs from input shape " << shape;
    throw Error(Status::InvalidArgument(text.str()));
  }
}

// Note [Outputs made at push]: a reducescatter's output holds this rank's
// block of the input's rows, whose shape the adapter knows from the input
// and the process set; made here, it costs Python no mx.nd.empty (several
// microseconds of a 4 KB call's few tens). It is allocated here, from
// MXNet's pool, as mx.nd.empty's would be.
// `size` and `me`: the process set's size and this rank's place in it (-1: not a member, which Check refuses).
std::unique_ptr<::mxnet::NDArray> ReducescatterOutput(const TensorOp& op, const ::mxnet::NDArray& in, int64_t size,
                                                      int64_t me, const std::string& who) {
  if (op.meta.op != OpType::kReducescatter) throw Error(Status::InvalidArgument(who + ": no output array given"));
  if (in.is_none()) throw Error(Status::InvalidArgument(who + ": an NDArray without data (empty handle)"));
  if (in.shape().ndim() < 1) throw Error(Status::InvalidArgument(who + ": needs a tensor with at least one dimension"));
  ::mxnet::TShape shape = in.shape();
  const int64_t rows = shape[0];
  shape[0] = size > 0 ? rows / size + (me >= 0 && me < rows % size ? 1 : 0) : 0;
  return std::make_unique<::mxnet::NDArray>(shape, in.ctx(), false, in.dtype());
}

// Note [Engine CUDA stream]: the cudaStream_t of the GPU worker running an
// engine op. MXNet 1.9.1 passes the op a RunContext (include/mxnet/base.h):
//   struct RunContext { Context ctx; void* stream; void* aux_stream; bool is_bulk; };
// where on a GPU worker `stream` is that worker's mshadow::Stream<gpu>*
// (include/mshadow/stream_gpu-inl.h):
//   template<> struct Stream<gpu> { cudaStream_t stream_; cublasHandle_t blas_handle_; ... };
// a struct without virtual members or bases, so `stream_` sits at offset 0.
// This extension is built against the wheel's headers with
// MSHADOW_USE_CUDA=0, where Stream<gpu> is the empty generic template and
// get_stream<gpu>()->stream_ does not exist: we read the first pointer-sized
// word instead (the assumption this adapter makes about MXNet's layout).
// ThreadedEnginePerDevice's GPU workers always pass their stream to ops
// pushed as FnProperty::kNormal, as ours are. A null `stream` would mean the
// legacy default stream: still correct (MXNet 1.x finishes an op on a GPU only
// once its stream has drained -- Stream<gpu>::Wait after each op or bulk
// segment -- so our inputs are complete when we run), but the core's ready
// event would then wait for every blocking stream of the device.
void* CudaStreamOf(const ::mxnet::RunContext& run_context) {
  if (run_context.stream == nullptr) return nullptr;
  return *static_cast<void* const*>(run_context.stream);
}

// GPU arrays: device pointers as they are (oneDNN layouts are a CPU thing)
// and the worker's stream, on which the core records the event its own
// streams wait for. Nothing here touches host memory.
void ResolveGpu(EngineOp* op, const ::mxnet::RunContext& run_context, std::vector<TensorOp>* ops) {
  void* stream = CudaStreamOf(run_context);
  for (size_t i = 0; i < ops->size(); ++i) {
    TensorOp& t = (*ops)[i];
    t.input.data = DataOf(op->inputs[i]);
    t.output.data = DataOf(op->outputs[i]);
    t.input.stream = t.output.stream = stream;
  }
}

// Note [oneDNN layouts]: oneDNN may keep a CPU array (e.g. conv weights after
// an inference forward) in a blocked layout. Read such inputs through a
// default-layout copy; mark such outputs as default layout (we overwrite them
// entirely). Inputs first: in place, input and output share storage.
void ResolveCpu(EngineOp* op, std::vector<TensorOp>* ops) {
  op->staged.reserve(op->inputs.size());
  for (size_t i = 0; i < ops->size(); ++i) {
    ::mxnet::NDArray& in = op->inputs[i];
    if (in.IsMKLDNNData()) {
      op->staged.push_back(in.Reorder2Default());
      (*ops)[i].input.data = DataOf(op->staged.back());
    } else {
      (*ops)[i].input.data = DataOf(in);
    }
  }
  for (size_t i = 0; i < ops->size(); ++i) {
    ::mxnet::NDArray& out = op->outputs[i];
    if (out.IsMKLDNNData()) out.InvalidateMKLDNNData();
    (*ops)[i].output.data = DataOf(out);
  }
}

// Runs on an engine worker once all dependencies are ready.
void Run(void* run_context, void* on_complete_ptr, void* param) {
  // Copy the completion object now: the engine's one dies when we return.
  ::mxnet::engine::CallbackOnComplete on_complete =
      *static_cast<::mxnet::engine::CallbackOnComplete*>(on_complete_ptr);
  auto* op = static_cast<EngineOp*>(param);
  try {
    // Run runs once per engine op: its records move out.
    std::vector<TensorOp> ops = std::move(op->ops);
    if (op->device == kCpuDevice) {
      ResolveCpu(op, &ops);
    } else {
      ResolveGpu(op, *static_cast<const ::mxnet::RunContext*>(run_context), &ops);
    }
    op->core->Enqueue(op->process_set_id, std::move(ops),
                      [on_complete](const Status& status) { Complete(on_complete, status); }, op->pushed_at);
  } catch (const Error& e) {
    op->core->NoteFailure(e.status().code());
    Complete(on_complete, e.status());
  } catch (const std::exception& e) {
    op->core->NoteFailure(StatusCode::kInternal);
    Complete(on_complete, Status::Internal(std::string("mxplugin: ") + e.what()));
  }
}

void Delete(void* param) { delete static_cast<EngineOp*>(param); }

}  // namespace

void PushCollective(Core* core, int process_set_id, std::vector<TensorOp> ops,
                    const std::vector<void*>& inputs, std::vector<void*> outputs,
                    const std::vector<bool>& of_array, int priority, std::vector<void*>* made) {
  auto who = [&ops](size_t i) { return std::string(OpTypeName(ops[i].meta.op)) + " '" + ops[i].meta.name + "'"; };
  std::vector<std::unique_ptr<::mxnet::NDArray>> made_here(ops.size());
  int64_t set_size = -1, set_rank = -1;  // asked once, at the first output to make
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto* in = static_cast<const ::mxnet::NDArray*>(inputs[i]);
    if (outputs[i] == nullptr) {
      if (made == nullptr || !of_array[i]) throw Error(Status::InvalidArgument(who(i) + ": no output array given"));
      if (set_size < 0) {
        set_size = static_cast<int64_t>(core->ProcessSetRanks(process_set_id).size());
        set_rank = core->ProcessSetRank(process_set_id);
      }
      made_here[i] = ReducescatterOutput(ops[i], *in, set_size, set_rank, who(i));
      outputs[i] = made_here[i].get();
    }
    const auto* out = static_cast<const ::mxnet::NDArray*>(outputs[i]);
    for (const auto* array : {in, out}) {
      if (array->is_none()) throw Error(Status::InvalidArgument(who(i) + ": an NDArray without data (empty handle)"));
      if (array->storage_type() != ::mxnet::kDefaultStorage) {
        // The trainers reduce row_sparse gradients as rows (mxplugin/training/sparse_rows.py), not through here
        throw Error(Status::InvalidArgument(who(i) + ": sparse NDArrays are not supported by collectives; use "
                                            "tostype('default') (DistributedTrainer, DistributedOptimizer and "
                                            "kvstore='mxplugin' reduce row_sparse gradients as rows)"));
      }
    }
    const int device = DeviceOf(in->ctx());
    if (DeviceOf(out->ctx()) != device) {
      throw Error(Status::InvalidArgument(who(i) + ": input is on " + ContextName(in->ctx()) + " but output on " +
                                          ContextName(out->ctx()) + "; both must be on one device"));
    }
    // One engine op runs on one device's worker (and, on a GPU, its stream),
    // and a group is negotiated and completes as one unit: a group spanning
    // devices is an error rather than split into one op per device.
    if (i > 0 && device != ops[0].meta.device) {
      const auto* first = static_cast<const ::mxnet::NDArray*>(inputs[0]);
      throw Error(Status::InvalidArgument(who(i) + " is on " + ContextName(in->ctx()) + " but '" +
                                          ops[0].meta.name + "' of the same grouped call on " +
                                          ContextName(first->ctx()) +
                                          ": all tensors of one grouped call must be on one device; "
                                          "make one call per device"));
    }
    if (of_array[i]) DescribeFromArray(&ops[i], *in, *out, who(i));
    // Core::Check decides whether GPU tensors can run (NCCL built or not).
    ops[i].meta.device = ops[i].input.device = ops[i].output.device = device;
  }
  core->Check(process_set_id, ops);
  auto op = std::make_unique<EngineOp>();
  op->core = core;
  op->process_set_id = process_set_id;
  op->pushed_at = core->StampPush();
  std::vector<NDArrayHandle> reads, writes;
  std::vector<::mxnet::Engine::VarHandle> write_vars;
  for (auto* v : {&reads, &writes}) v->reserve(ops.size());
  write_vars.reserve(ops.size());
  op->inputs.reserve(ops.size());
  op->outputs.reserve(ops.size());
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
  op->device = ops.empty() ? kCpuDevice : ops[0].meta.device;
  op->ops = std::move(ops);
  // A GPU group runs on that GPU's worker, which passes Run its stream.
  const ::mxnet::Context ctx = op->outputs.empty() ? ::mxnet::Context::CPU() : op->outputs[0].ctx();
  // Note [Collectives run where they are pushed]: Run only hands the
  // tensors to the core, so a CPU collective whose inputs are ready runs on
  // the pushing thread (kAsync) instead of waking an engine worker for it
  // (and queueing behind that worker's compute): one thread hand-off less
  // (4 KB allreduce_ end to end at 2 ranks: 18.5 -> 16 us). One whose inputs are
  // still being computed runs on a worker once they are, as before. GPU
  // groups stay kNormal: only a GPU worker passes Run its CUDA stream.
  const auto property = ctx.dev_mask() == ::mxnet::Context::kCPU ? ::mxnet::FnProperty::kAsync
                                                                  : ::mxnet::FnProperty::kNormal;
  PushAsync(&Run, op.release(), &Delete, ctx, std::move(reads), std::move(writes), priority, "mxplugin_collective",
            property);
  if (made == nullptr) return;
  made->assign(made_here.size(), nullptr);
  for (size_t i = 0; i < made_here.size(); ++i) (*made)[i] = made_here[i].release();
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
