// A joined rank's stand-ins (Note [Joined ranks] in message_table.cc): the
// buffers with which it takes part in a request it never made.
#include "core/executor.h"

namespace mxplugin {

// The stand-in's buffers, by what the request asks of a joined rank: zeros
// to add (allreduce, reducescatter; what it gets back is dropped), no rows
// (or zeros where asked) to gather and room for everyone's, room to receive a broadcast, nothing for
// a barrier or a refusal.
void Executor::MakeStandIn(const Response& resp, StandIn* stand_in) const {
  Request& req = stand_in->request;
  req.meta = resp.meta;
  req.meta.rank = comm_->rank();
  req.stand_in = true;
  req.enqueue_time = Clock::now();
  TensorRef tensor;
  tensor.dtype = req.meta.dtype;
  tensor.shape = req.meta.shape;
  req.input = tensor;
  req.output = tensor;
  const int64_t row_bytes = tensor.row_elements() * static_cast<int64_t>(DataTypeSize(tensor.dtype));
  switch (req.meta.op) {
    case OpType::kAllreduce:
    case OpType::kBroadcast:
      stand_in->input.assign(static_cast<size_t>(tensor.num_bytes()), 0);
      req.input.data = req.output.data = stand_in->input.data();
      break;
    case OpType::kReducescatter: {
      stand_in->input.assign(static_cast<size_t>(tensor.num_bytes()), 0);
      req.input.data = stand_in->input.data();
      const int64_t rows = tensor.shape[0], size = comm_->size(), me = comm_->rank();
      req.output.shape[0] = rows / size + (me < rows % size ? 1 : 0);
      stand_in->output.assign(static_cast<size_t>(req.output.shape[0] * row_bytes), 0);
      req.output.data = stand_in->output.data();
      break;
    }
    case OpType::kAllgather: {
      if (req.meta.zeros_when_joined) {
        stand_in->input.assign(static_cast<size_t>(tensor.num_bytes()), 0);
        req.input.data = stand_in->input.data();
      } else {
        req.input.shape[0] = 0;
      }
      int64_t rows = 0;
      for (int64_t r : resp.sizes) rows += r;
      req.output.shape[0] = rows;
      stand_in->output.assign(static_cast<size_t>(rows * row_bytes), 0);
      req.output.data = stand_in->output.data();
      break;
    }
    default:  // barrier, refusal: no data
      req.input = req.output = TensorRef();
      break;
  }
}

}  // namespace mxplugin
