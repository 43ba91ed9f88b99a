// Note [Host exchanges in one call]: a small allgather or alltoall of host
// NDArrays (mxplugin/host_exchange.py tries them; Takes below declines what
// it does not take, before anything is submitted) runs in one round with the
// output left to the core (Note [Outputs the core sizes] in
// core/sized_output.cc). Its caller waits for the result anyway, so everything
// around that round is done here, in one call from Python without its lock:
// the wait for the input's writers, a snapshot of its rows (so that a write
// pushed meanwhile by another thread cannot tear what is sent: the same
// snapshot asnumpy() took), and the new output NDArray, written where it
// lies, by the core as it sizes it (no engine op uses it yet: the core's
// thread may make an NDArray, MXNet's pool is shared by every thread), and
// the checks of the inputs' dtype, context, storage and shape. Done from
// Python, through MXNet's API, these cost more than the round itself on a
// busy host (an engine wait and a copy for asnumpy(), an allocation for
// mx.nd.empty, 1-2 us for each property read). Results are the bytes the engine path gives: the
// same rows in rank order.
#include "mxnet/host_exchange.h"

#include <mxnet/ndarray.h>

#include <cstring>
#include <future>
#include <memory>
#include <string>

#include "mxnet/array_types.h"

namespace mxplugin {
namespace mxnet_adapter {

namespace {

// Whether the one-call path takes `array` for `op` (an alltoall's splits
// filled in where they were left empty: its rows in equal blocks), checked
// for every input before anything is done, so that a declined call has
// submitted nothing and can take the engine path, whose checks name what is
// wrong. The binding reads none of dtype, context, storage or shape: through
// MXNet's Python API each costs 1-2 us, several times a 4 KB call's margin.
bool Takes(const ::mxnet::NDArray& array, int set_size, TensorOp* op) {
  std::string unused;
  if (array.is_none() || array.storage_type() != ::mxnet::kDefaultStorage ||
      array.ctx().dev_mask() != ::mxnet::Context::kCPU || array.shape().ndim() < 1 ||
      !::mxnet::shape_is_known(array.shape()) || !DataTypeOfArray(array.dtype(), &op->meta.dtype, &unused)) {
    return false;
  }
  if (op->meta.op != OpType::kAlltoall) return true;
  const int64_t rows = array.shape()[0];
  std::vector<int64_t>& splits = op->meta.splits;
  if (splits.empty()) {
    if (set_size <= 0 || rows % set_size != 0) return false;
    splits.assign(set_size, rows / set_size);
  }
  int64_t sum = 0;
  for (int64_t s : splits) {
    if (s < 0 || s > rows - sum) return false;  // each within what is left: the sum cannot overflow
    sum += s;
  }
  return static_cast<int>(splits.size()) == set_size && sum == rows;
}

}  // namespace

bool ExchangeHost(Core* core, int process_set_id, int set_size, std::vector<TensorOp> ops,
                  const std::vector<void*>& inputs, std::vector<void*>* outputs,
                  std::vector<std::vector<int64_t>>* from_each, int64_t* exchanged_bytes) {
  const size_t n = ops.size();
  std::vector<::mxnet::NDArray> arrays;
  arrays.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    arrays.push_back(*static_cast<const ::mxnet::NDArray*>(inputs[i]));
    if (!Takes(arrays[i], set_size, &ops[i])) return false;
  }
  std::vector<std::vector<char>> snapshots(n);
  // The outputs, made on the core's thread once their rows are known.
  std::vector<std::shared_ptr<std::unique_ptr<::mxnet::NDArray>>> made(n);
  for (size_t i = 0; i < n; ++i) {
    ::mxnet::NDArray& array = arrays[i];
    TensorOp& op = ops[i];
    array.WaitToRead();
    // Note [oneDNN layouts] (engine_op.cc): read a blocked array through a default-layout copy.
    const ::mxnet::NDArray plain = array.IsMKLDNNData() ? array.Reorder2Default() : array;
    const ::mxnet::TShape& shape = array.shape();
    op.meta.shape.assign(shape.begin(), shape.end());
    op.input.shape = op.meta.shape;
    op.input.dtype = op.output.dtype = op.meta.dtype;
    const size_t bytes = static_cast<size_t>(op.input.num_bytes());
    snapshots[i].resize(bytes);
    if (bytes != 0) std::memcpy(snapshots[i].data(), plain.data().dptr_, bytes);
    op.input.data = snapshots[i].data();
    op.output.data = nullptr;
    op.sized_output = std::make_shared<SizedOutput>();
    made[i] = std::make_shared<std::unique_ptr<::mxnet::NDArray>>();
    op.sized_output->place = [made = made[i], shape = array.shape(), ctx = array.ctx(),
                              dtype = array.dtype()](int64_t rows, size_t) -> void* {
      ::mxnet::TShape out_shape = shape;
      out_shape[0] = rows;
      *made = std::make_unique<::mxnet::NDArray>(out_shape, ctx, false, dtype);
      return (*made)->data().dptr_;
    };
  }
  std::vector<std::shared_ptr<SizedOutput>> sized(n);
  std::vector<int64_t> row_bytes(n);
  for (size_t i = 0; i < n; ++i) {
    sized[i] = ops[i].sized_output;
    row_bytes[i] = ops[i].input.row_elements() * static_cast<int64_t>(DataTypeSize(ops[i].meta.dtype));
  }
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> finished = done->get_future();
  core->Enqueue(process_set_id, std::move(ops), [done](const Status& status) { done->set_value(status); });
  const Status status = finished.get();
  // The executor sized every output it ran (from_each set), whatever became of its place.
  int64_t total = 0;
  bool ran = true;
  for (size_t i = 0; i < n; ++i) {
    ran = ran && !sized[i]->from_each.empty();
    total += sized[i]->exchanged_rows * row_bytes[i];
  }
  if (ran) *exchanged_bytes = total;
  if (!status.ok()) throw Error(status);
  outputs->assign(n, nullptr);
  from_each->assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    if (!*made[i]) throw Error(Status::Internal("the core finished an exchange without making its output"));
  }
  for (size_t i = 0; i < n; ++i) {
    (*outputs)[i] = made[i]->release();
    (*from_each)[i] = sized[i]->from_each;
  }
  return true;
}

}  // namespace mxnet_adapter
}  // namespace mxplugin
