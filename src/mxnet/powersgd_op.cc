// Compiled against MXNet's C++ headers, like engine_op.cc.
#include "mxnet/powersgd_op.h"

#include <mxnet/c_api.h>
#include <mxnet/engine.h>
#include <mxnet/ndarray.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/status.h"
#include "mxnet/engine_push.h"
#include "mxnet/plain_data.h"

namespace mxplugin {
namespace mxnet_adapter {
namespace {

struct Matrix {
  // Copies sharing storage with the caller's arrays: they keep it alive
  // until the op has run, even if Python drops its objects.
  ::mxnet::NDArray grad, error, p, q;
  int64_t m = 0, n = 0;
  int rank = 0;
};

struct PowerSgdOp {
  compress::PowerSgdStage stage;
  std::vector<Matrix> matrices;
};

void RunStage(PowerSgdOp* op) {
  for (Matrix& a : op->matrices) {
    std::vector<::mxnet::NDArray> staged;
    compress::PowerSgdMatrix k;
    k.m = a.m;
    k.n = a.n;
    k.rank = a.rank;
    switch (op->stage) {
      case compress::PowerSgdStage::kAccumulate:
        k.grad = ReadableData(a.grad, &staged);
        k.q = ReadableData(a.q, &staged);
        k.error = WritableData(a.error);
        k.p = WritableData(a.p);
        break;
      case compress::PowerSgdStage::kResidual:
        k.p = ReadableData(a.p, &staged);
        k.error = WritableData(a.error);
        k.q = WritableData(a.q);
        k.grad = k.error;  // not touched by this stage
        break;
      case compress::PowerSgdStage::kReconstruct:
        k.p = ReadableData(a.p, &staged);
        k.q = ReadableData(a.q, &staged);
        k.grad = WritableData(a.grad);
        k.error = k.grad;  // not touched by this stage
        break;
    }
    compress::RunPowerSgdStage(op->stage, k);
  }
}

void Run(void* /*run_context*/, void* on_complete_ptr, void* param) {
  // Copy the completion object now: the engine's one dies when we return.
  ::mxnet::engine::CallbackOnComplete on_complete =
      *static_cast<::mxnet::engine::CallbackOnComplete*>(on_complete_ptr);
  try {
    RunStage(static_cast<PowerSgdOp*>(param));
    on_complete();
  } catch (const Error& e) {
    Complete(on_complete, e.status());
  } catch (const std::exception& e) {
    Complete(on_complete, Status::Internal(std::string("mxplugin: ") + e.what()));
  }
}

void Delete(void* param) { delete static_cast<PowerSgdOp*>(param); }

const char* kWhat = "PowerSGD";
const char* kTakers = "PowerSGD's kernels";

::mxnet::NDArray Sized(void* handle, const std::string& role, int64_t elements) {
  const ::mxnet::NDArray& array = PlainFloat32Array(handle, kWhat, kTakers, role);
  const int64_t size = static_cast<int64_t>(array.shape().Size());
  if (size != elements) {
    throw Error(Status::InvalidArgument(std::string(kWhat) + ": " + role + " has " + std::to_string(size) +
                                        " elements, the matrix needs " + std::to_string(elements)));
  }
  return array;
}

}  // namespace

void PushPowerSgdStage(compress::PowerSgdStage stage, const std::vector<PowerSgdArrays>& matrices, int priority) {
  if (matrices.empty()) throw Error(Status::InvalidArgument("PowerSGD: a stage needs at least one matrix"));
  auto op = std::make_unique<PowerSgdOp>();
  op->stage = stage;
  std::vector<NDArrayHandle> reads, writes;
  std::set<::mxnet::Engine::VarHandle> read_vars, written_vars;
  for (size_t i = 0; i < matrices.size(); ++i) {
    const PowerSgdArrays& in = matrices[i];
    compress::PowerSgdMatrix shape;
    shape.m = in.m;
    shape.n = in.n;
    shape.rank = in.rank;
    compress::CheckPowerSgdShape(shape);
    const std::string which = "matrix " + std::to_string(i) + "'s ";
    Matrix a;
    a.m = in.m;
    a.n = in.n;
    a.rank = in.rank;
    a.grad = Sized(in.grad, which + "gradient", in.m * in.n);
    a.error = Sized(in.error, which + "error buffer", in.m * in.n);
    a.p = Sized(in.p, which + "P", static_cast<int64_t>(in.rank) * shape.rows());
    a.q = Sized(in.q, which + "Q", static_cast<int64_t>(in.rank) * shape.cols());
    op->matrices.push_back(std::move(a));
  }
  // Handles point into op->matrices, which no longer grows. Views of one
  // array (gradients in one bucket) are one engine variable: listed once,
  // and the ranges written must not overlap anything else of the variable.
  std::map<::mxnet::Engine::VarHandle, std::vector<std::pair<size_t, size_t>>> ranges;
  auto add = [&](::mxnet::NDArray* array, bool written, const std::string& role) {
    auto& same = written ? written_vars : read_vars;
    const auto& other = written ? read_vars : written_vars;
    const auto var = array->var();
    const size_t begin = array->byte_offset(), end = begin + array->shape().Size() * sizeof(float);
    bool overlaps = other.count(var) > 0;
    if (written || same.count(var)) {
      for (const auto& r : ranges[var]) overlaps = overlaps || (begin < r.second && r.first < end);
    }
    if (overlaps) {
      throw Error(Status::InvalidArgument(std::string(kWhat) + ": " + role +
                                          " overlaps another array of the stage that one of them writes"));
    }
    if (written) ranges[var].emplace_back(begin, end);
    if (same.insert(var).second) (written ? writes : reads).push_back(array);
  };
  for (size_t i = 0; i < op->matrices.size(); ++i) {
    Matrix& a = op->matrices[i];
    const std::string which = "matrix " + std::to_string(i) + "'s ";
    switch (stage) {
      case compress::PowerSgdStage::kAccumulate:
        add(&a.error, true, which + "error buffer");
        add(&a.p, true, which + "P");
        add(&a.grad, false, which + "gradient");
        add(&a.q, false, which + "Q");
        break;
      case compress::PowerSgdStage::kResidual:
        add(&a.error, true, which + "error buffer");
        add(&a.q, true, which + "Q");
        add(&a.p, false, which + "P");
        break;
      case compress::PowerSgdStage::kReconstruct:
        add(&a.grad, true, which + "gradient");
        add(&a.p, false, which + "P");
        add(&a.q, false, which + "Q");
        break;
    }
  }
  const ::mxnet::Context ctx = op->matrices.front().error.ctx();
  PushAsync(&Run, op.release(), &Delete, ctx, std::move(reads), std::move(writes), priority, "mxplugin_powersgd");
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
