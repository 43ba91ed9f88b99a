// The device work of each GPU op on its lane: waiting for the producer,
// packing and unpacking the fusion buffer, the NCCL call, the scale passes.
// Everything here only enqueues; completion is GpuExecutor's other half.
#include <algorithm>

#include "core/collective_layout.h"
#include "core/fusion_buffer.h"
#include "core/gpu_executor.h"

namespace mxplugin {
namespace gpu {

Status GpuExecutor::WaitReady(Lane& lane, const Request& request) {
  if (!request.ready_event) return Status::Ok();
  return runtime_->WaitEvent(lane.stream, request.ready_event.get());
}

Status GpuExecutor::Scale(Lane& lane, void* dst, const void* src, int64_t count, DataType dtype, double factor) {
  if (count == 0 || (factor == 1.0 && dst == src)) return Status::Ok();
  const cuda::CopyDescriptor copy{src, dst, count, factor};
  return runtime_->BatchedCopyAndScale(&copy, 1, dtype, lane.stream);
}

// Grows the lane's fusion buffer, at least doubling it. With stream-ordered
// allocation the old one is freed behind the queued work that may still read
// it; without it, the old one is kept until the executor goes, since freeing
// it would wait for the whole device. Doubling bounds what is kept: the
// outgrown buffers add up to less than the current one, which is under twice
// the largest request (or 1 MiB), so a lane holds under 4x its largest need
// (growing to each exact size would keep the sum of all sizes seen).
Status GpuExecutor::Reserve(Lane& lane, int64_t bytes, void** out) {
  if (bytes > lane.fusion_bytes) {
    const int64_t want = std::max<int64_t>({bytes, 2 * lane.fusion_bytes, 1 << 20});
    if (lane.fusion != nullptr) {
      if (stream_ordered_alloc_) {
        Status st = runtime_->Free(lane.fusion, lane.stream, true);
        if (!st.ok()) return st;
      } else {
        lane.retired.push_back(lane.fusion);
      }
    }
    lane.fusion = nullptr;
    lane.fusion_bytes = 0;
    Status st = runtime_->Allocate(want, lane.stream, stream_ordered_alloc_, &lane.fusion);
    if (!st.ok()) return st;
    lane.fusion_bytes = want;
  }
  *out = lane.fusion;
  return Status::Ok();
}

// Pack with prescale, reduce, unpack with postscale: two batched kernel
// launches and one NCCL call for the whole group.
Status GpuExecutor::LaunchFused(Lane& lane, std::vector<Request>& group) {
  if (group.size() == 1) return LaunchAllreduce(lane, group[0]);
  const Request& first = group[0];
  const DataType dtype = first.meta.dtype;
  int64_t bytes = 0;
  for (const Request& r : group) bytes = AlignFusionOffset(bytes) + r.input.num_bytes();
  void* buffer = nullptr;
  Status st;
  for (const Request& r : group) {
    if (st.ok()) st = WaitReady(lane, r);
  }
  if (!st.ok()) return st;
  if (lane.comm->size() == 1) {
    // Note [One rank needs no collective]: the pack's prescale straight into
    // the outputs, then the unpack's postscale in place: the same arithmetic
    // as through the buffer, without the buffer or an NCCL call.
    std::vector<cuda::CopyDescriptor> pre, post;
    for (const Request& r : group) {
      pre.push_back({r.input.data, r.output.data, r.input.num_elements(), r.meta.prescale});
      if (r.meta.postscale != 1.0) post.push_back({r.output.data, r.output.data, r.output.num_elements(),
                                                   r.meta.postscale});
    }
    st = runtime_->BatchedCopyAndScale(pre.data(), static_cast<int64_t>(pre.size()), dtype, lane.stream);
    if (st.ok() && !post.empty()) {
      st = runtime_->BatchedCopyAndScale(post.data(), static_cast<int64_t>(post.size()), dtype, lane.stream);
    }
    return st;
  }
  st = Reserve(lane, bytes, &buffer);
  if (!st.ok()) return st;
  std::vector<cuda::CopyDescriptor> in, out;
  int64_t offset = 0;
  for (const Request& r : group) {
    offset = AlignFusionOffset(offset);
    char* slot = static_cast<char*>(buffer) + offset;
    in.push_back({r.input.data, slot, r.input.num_elements(), r.meta.prescale});
    out.push_back({slot, r.output.data, r.output.num_elements(), r.meta.postscale});
    offset += r.input.num_bytes();
  }
  st = runtime_->BatchedCopyAndScale(in.data(), static_cast<int64_t>(in.size()), dtype, lane.stream);
  if (st.ok()) {
    st = lane.comm->Allreduce(buffer, buffer, offset / static_cast<int64_t>(DataTypeSize(dtype)), dtype,
                              first.meta.reduce_op);
  }
  if (st.ok()) st = runtime_->BatchedCopyAndScale(out.data(), static_cast<int64_t>(out.size()), dtype, lane.stream);
  return st;
}

// Note [Pre-multiplied sums]: NCCL's pre-multiplied sum takes its factor in
// the element type. For float32 and float64 that is the factor as the scale
// kernels use it (they scale float32 in float32); for the half types it is
// not: bfloat16 keeps 8 bits of it (1/3 becomes 0.33398, +0.2%), float16
// makes a factor above 65504 infinity (0 x inf = NaN) and one below about
// 6e-8 zero, while the fused path and the CPU scale halves in float32. So
// only float32 and float64 sums are pre-multiplied; halves take the scale
// kernels around the sum, as in the fused path, and a direct result equals
// a fused one on the same inputs (where NCCL adds the ranks in the same
// order). Averaging a large half tensor thus costs one kernel pass.
bool GpuExecutor::PreMultiplies(const Lane& lane, const Request& req) const {
  const DataType dtype = req.meta.dtype;
  return req.meta.reduce_op == ReduceOp::kSum && req.meta.prescale * req.meta.postscale != 1.0 &&
         (dtype == DataType::kFloat32 || dtype == DataType::kFloat64) && lane.comm->ScaledSumSupported(dtype);
}

// Large tensors are reduced where they lie: a scaled float32/float64 sum in
// one pre-multiplied NCCL call; otherwise the scaling costs a kernel pass on
// each side, as on the CPU.
Status GpuExecutor::LaunchAllreduce(Lane& lane, Request& req) {
  const int64_t n = req.input.num_elements();
  const DataType dtype = req.meta.dtype;
  Status st = WaitReady(lane, req);
  if (!st.ok() || n == 0) return st;
  const double factor = req.meta.prescale * req.meta.postscale;
  const bool pre_multiplied = PreMultiplies(lane, req);
  // Note [One rank needs no collective]: at one rank every reduction is the
  // identity, so the result is the input times its factors, computed as the
  // multi-rank path would (one pass with the product where NCCL would
  // pre-multiply, else prescale then postscale), with no NCCL call. Besides
  // saving the call, this avoids NCCL's one-rank pre-multiplied sum, which
  // leaves the last count % blocks elements unwritten for some counts
  // (200,003 float16 or float64 elements lose 3; found on an H100).
  if (lane.comm->size() == 1) {
    if (pre_multiplied) return Scale(lane, req.output.data, req.input.data, n, dtype, factor);
    st = Scale(lane, req.output.data, req.input.data, n, dtype, req.meta.prescale);
    if (st.ok()) st = Scale(lane, req.output.data, req.output.data, n, dtype, req.meta.postscale);
    return st;
  }
  if (pre_multiplied) return lane.comm->ScaledSum(req.input.data, req.output.data, n, dtype, factor);
  const void* send = req.input.data;
  if (req.meta.prescale != 1.0) {
    st = Scale(lane, req.output.data, req.input.data, n, dtype, req.meta.prescale);
    if (!st.ok()) return st;
    send = req.output.data;
  }
  st = lane.comm->Allreduce(send, req.output.data, n, dtype, req.meta.reduce_op);
  if (st.ok()) st = Scale(lane, req.output.data, req.output.data, n, dtype, req.meta.postscale);
  return st;
}

Status GpuExecutor::LaunchReducescatter(Lane& lane, Request& req) {
  std::vector<int64_t> counts;
  Status st = ReducescatterCounts(req, lane.comm->rank(), lane.comm->size(), &counts);
  if (!st.ok()) return st;
  const void* send = req.input.data;
  if (req.meta.prescale != 1.0) {
    void* scratch = nullptr;
    st = Reserve(lane, req.input.num_bytes(), &scratch);
    if (st.ok()) {
      st = Scale(lane, scratch, req.input.data, req.input.num_elements(), req.meta.dtype, req.meta.prescale);
    }
    if (!st.ok()) return st;
    send = scratch;
  }
  st = lane.comm->ReduceScatter(send, req.output.data, counts, req.meta.dtype, req.meta.reduce_op);
  if (st.ok()) {
    st = Scale(lane, req.output.data, req.output.data, req.output.num_elements(), req.meta.dtype, req.meta.postscale);
  }
  return st;
}

Status GpuExecutor::LaunchOne(Lane& lane, Request& req, const Response& resp, const char** phase) {
  GpuCommunicator& comm = *lane.comm;
  if (req.meta.op == OpType::kAllreduce) {
    *phase = "NCCL_ALLREDUCE";
    return LaunchAllreduce(lane, req);
  }
  Status st = WaitReady(lane, req);
  if (!st.ok()) return st;
  switch (req.meta.op) {
    case OpType::kAllgather: {
      *phase = "NCCL_ALLGATHER";
      std::vector<int64_t> counts;
      st = AllgatherCounts(req, resp, &counts);
      if (!st.ok()) return st;
      return comm.Allgatherv(req.input.data, req.input.num_elements(), req.output.data, counts,
                             Displacements(counts), req.meta.dtype);
    }
    case OpType::kBroadcast: {
      *phase = "NCCL_BROADCAST";
      const int64_t n = req.input.num_elements();
      if (n == 0) return Status::Ok();
      if (comm.rank() == req.meta.set_root && req.output.data != req.input.data) {
        st = Scale(lane, req.output.data, req.input.data, n, req.meta.dtype, 1.0);
        if (!st.ok()) return st;
      }
      return comm.Broadcast(req.output.data, n, req.meta.dtype, req.meta.set_root);
    }
    case OpType::kAlltoall: {
      *phase = "NCCL_ALLTOALL";
      std::vector<int64_t> send_counts, recv_counts;
      st = AlltoallCounts(req, resp, comm.rank(), comm.size(), &send_counts, &recv_counts);
      if (!st.ok()) return st;
      return comm.Alltoallv(req.input.data, send_counts, Displacements(send_counts), req.output.data, recv_counts,
                            Displacements(recv_counts), req.meta.dtype);
    }
    case OpType::kReducescatter:
      *phase = "NCCL_REDUCESCATTER";
      return LaunchReducescatter(lane, req);
    default:
      return Status::Internal(std::string(OpTypeName(req.meta.op)) + " has no GPU implementation");
  }
}

}  // namespace gpu
}  // namespace mxplugin
