#include "backend/nccl/nccl_communicator.h"

#include <cuda_runtime.h>

#include <thread>

#include "backend/nccl/nccl_describe.h"
#include "common/half.h"

namespace mxplugin {
namespace {

void Pause() { std::this_thread::sleep_for(std::chrono::microseconds(20)); }

Status NcclType(DataType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DataType::kUInt8: *out = ncclUint8; return Status::Ok();
    case DataType::kInt8: *out = ncclInt8; return Status::Ok();
    case DataType::kInt32: *out = ncclInt32; return Status::Ok();
    case DataType::kInt64: *out = ncclInt64; return Status::Ok();
    case DataType::kFloat16: *out = ncclFloat16; return Status::Ok();
    case DataType::kFloat32: *out = ncclFloat32; return Status::Ok();
    case DataType::kFloat64: *out = ncclFloat64; return Status::Ok();
    case DataType::kBFloat16:
#if defined(__CUDA_BF16_TYPES_EXIST__)
      *out = ncclBfloat16;
      return Status::Ok();
#else
      break;
#endif
  }
  return Status::InvalidArgument(std::string("NCCL has no ") + DataTypeName(dtype) + " type in this build");
}

Status NcclOp(ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case ReduceOp::kSum: *out = ncclSum; return Status::Ok();
    // Core::Enqueue sends Average as a Sum with a 1/size factor. ncclAvg is
    // not used: at one rank it would be NCCL's pre-multiplied sum, which
    // leaves the tail of some counts unwritten (Note [One rank needs no
    // collective] in core/gpu_launch.cc).
    case ReduceOp::kAverage:
      return Status::Internal("an Average reached the NCCL backend; the core sends it as a Sum with a 1/size factor");
    case ReduceOp::kMin: *out = ncclMin; return Status::Ok();
    case ReduceOp::kMax: *out = ncclMax; return Status::Ok();
    case ReduceOp::kProduct: *out = ncclProd; return Status::Ok();
  }
  return Status::InvalidArgument("unknown reduce op");
}

const char* At(const void* base, int64_t elements, DataType dtype) {
  return static_cast<const char*>(base) + elements * static_cast<int64_t>(DataTypeSize(dtype));
}

char* At(void* base, int64_t elements, DataType dtype) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(DataTypeSize(dtype));
}

bool AllEqual(const std::vector<int64_t>& v) {
  for (int64_t x : v) {
    if (x != v[0]) return false;
  }
  return true;
}

}  // namespace

NcclCommunicator::~NcclCommunicator() {
  // The owner has waited for this communicator's work and no other thread
  // uses it now; finalising flushes NCCL's own pending operations.
  if (aborted_) return;
  ncclResult_t r = ncclCommFinalize(comm_);
  Status st = r == ncclSuccess || r == ncclInProgress ? Settle("ncclCommFinalize", std::chrono::seconds(10))
                                                      : Status::Internal("ncclCommFinalize failed");
  if (st.ok()) {
    ncclCommDestroy(comm_);
  } else if (!aborted_) {
    ncclCommAbort(comm_);
  }
}

void NcclCommunicator::Abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

Status NcclCommunicator::AsyncError() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return Status::Aborted("the NCCL communicator was aborted");
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return Status::Internal("ncclCommGetAsyncError failed: " + DescribeNccl(r, comm_));
  if (state == ncclSuccess || state == ncclInProgress) return Status::Ok();
  return Status::Aborted("NCCL reports " + DescribeNccl(state, comm_) +
                         (state == ncclRemoteError || state == ncclSystemError
                              ? ": a peer process has probably died or lost its connection"
                              : ""));
}

Status NcclCommunicator::Settle(const char* what, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) return Status::Aborted(std::string(what) + ": the NCCL communicator was aborted");
      ncclResult_t state = ncclInProgress;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return Status::Ok();
      if (state != ncclInProgress) return Status::Internal(std::string(what) + " failed: " + DescribeNccl(state, comm_));
    }
    if (Clock::now() > deadline) {
      return Status::Aborted(std::string(what) + " stayed in progress for " +
                             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                             " s: a peer is probably gone");
    }
    Pause();
  }
}

Status NcclCommunicator::Run(const char* what, const std::function<ncclResult_t()>& calls) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return Status::Aborted(std::string(what) + ": the NCCL communicator was aborted");
    ncclResult_t r = calls();
    if (r == ncclSuccess) return Status::Ok();
    if (r != ncclInProgress) return Status::Internal(std::string(what) + " failed: " + DescribeNccl(r, comm_));
  }
  return Settle(what, call_timeout_);
}

namespace {

// Calls in one NCCL group: every call is made (NCCL wants the group closed
// whatever happened), and the first failure, else the group's result, is
// returned.
ncclResult_t Grouped(const std::function<void(ncclResult_t*)>& calls) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t first = ncclSuccess;
  calls(&first);
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

void Note(ncclResult_t r, ncclResult_t* first) {
  if (*first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) *first = r;
}

}  // namespace

Status NcclCommunicator::Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t red = ncclSum;
  Status st = NcclType(dtype, &type);
  if (st.ok()) st = NcclOp(op, &red);
  if (!st.ok()) return st;
  return Run("ncclAllReduce", [&] {
    return ncclAllReduce(send, recv, static_cast<size_t>(count), type, red, comm_, static_cast<cudaStream_t>(stream_));
  });
}

bool NcclCommunicator::ScaledSumSupported(DataType dtype) const {
  // Integers would multiply by a truncated factor; the CPU path scales them
  // after the sum, in float64, so they keep a separate scale pass.
  ncclDataType_t type = ncclFloat32;
  return (dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
          dtype == DataType::kBFloat16) &&
         NcclType(dtype, &type).ok();
}

Status NcclCommunicator::ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) {
  if (!ScaledSumSupported(dtype)) {
    return Status::InvalidArgument(std::string("NCCL cannot pre-multiply ") + DataTypeName(dtype));
  }
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  // The scalar has the element type, as NCCL reads it.
  union {
    double f64;
    float f32;
    uint16_t half;
  } scalar;
  if (dtype == DataType::kFloat64) {
    scalar.f64 = factor;
  } else if (dtype == DataType::kFloat32) {
    scalar.f32 = static_cast<float>(factor);
  } else if (dtype == DataType::kFloat16) {
    scalar.half = FloatToHalf(static_cast<float>(factor));
  } else {
    scalar.half = FloatToBFloat16(static_cast<float>(factor));
  }
  ncclRedOp_t op;
  bool created = false;
  Status result = Run("ncclAllReduce (pre-multiplied sum)", [&] {
    ncclResult_t r = ncclRedOpCreatePreMulSum(&op, &scalar, type, ncclScalarHostImmediate, comm_);
    if (r != ncclSuccess) return r;
    created = true;
    return ncclAllReduce(send, recv, static_cast<size_t>(count), type, op, comm_, static_cast<cudaStream_t>(stream_));
  });
  // The operator goes once the call using it has settled.
  std::lock_guard<std::mutex> lock(mutex_);
  if (created && !aborted_) {
    ncclResult_t r = ncclRedOpDestroy(op, comm_);
    if (r != ncclSuccess && result.ok()) {
      result = Status::Internal("ncclRedOpDestroy (after a pre-multiplied sum) failed: " + DescribeNccl(r, comm_));
    }
  }
  return result;
}

Status NcclCommunicator::Allgatherv(const void* send, int64_t send_count, void* recv,
                                    const std::vector<int64_t>& counts, const std::vector<int64_t>& displs,
                                    DataType dtype) {
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  bool packed = AllEqual(counts);
  for (size_t r = 0; r < counts.size() && packed; ++r) packed = displs[r] == static_cast<int64_t>(r) * counts[0];
  if (packed) {
    if (counts[0] == 0) return Status::Ok();
    return Run("ncclAllGather", [&] {
      return ncclAllGather(send, recv, static_cast<size_t>(send_count), type, comm_, stream);
    });
  }
  // Uneven blocks: every rank broadcasts its own, all in one group.
  return Run("ncclBroadcast (allgather)", [&] {
    return Grouped([&](ncclResult_t* first) {
      for (int r = 0; r < size_; ++r) {
        if (counts[r] == 0) continue;
        char* slot = At(recv, displs[r], dtype);
        // Non-roots' send buffer is unused; a valid pointer keeps NCCL's checks quiet.
        Note(ncclBroadcast(r == rank_ ? send : slot, slot, static_cast<size_t>(counts[r]), type, r, comm_, stream),
             first);
      }
    });
  });
}

Status NcclCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  return Run("ncclBroadcast", [&] {
    return ncclBroadcast(buffer, buffer, static_cast<size_t>(count), type, root, comm_,
                         static_cast<cudaStream_t>(stream_));
  });
}

Status NcclCommunicator::Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& send_displs, void* recv,
                                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                                   DataType dtype) {
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  return Run("ncclSend/ncclRecv (alltoall)", [&] {
    return Grouped([&](ncclResult_t* first) {
      for (int r = 0; r < size_; ++r) {
        if (send_counts[r] > 0) {
          Note(ncclSend(At(send, send_displs[r], dtype), static_cast<size_t>(send_counts[r]), type, r, comm_, stream),
               first);
        }
        if (recv_counts[r] > 0) {
          Note(ncclRecv(At(recv, recv_displs[r], dtype), static_cast<size_t>(recv_counts[r]), type, r, comm_, stream),
               first);
        }
      }
    });
  });
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                                       DataType dtype, ReduceOp op) {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t red = ncclSum;
  Status st = NcclType(dtype, &type);
  if (st.ok()) st = NcclOp(op, &red);
  if (!st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (AllEqual(recv_counts)) {
    if (recv_counts[0] == 0) return Status::Ok();
    return Run("ncclReduceScatter", [&] {
      return ncclReduceScatter(send, recv, static_cast<size_t>(recv_counts[0]), type, red, comm_, stream);
    });
  }
  // Uneven blocks: block r is reduced onto rank r, all in one group.
  return Run("ncclReduce (reducescatter)", [&] {
    return Grouped([&](ncclResult_t* first) {
      int64_t offset = 0;
      for (int r = 0; r < size_; ++r) {
        // recv is written on rank r only.
        if (recv_counts[r] > 0) {
          Note(ncclReduce(At(send, offset, dtype), recv, static_cast<size_t>(recv_counts[r]), type, red, r, comm_,
                          stream),
               first);
        }
        offset += recv_counts[r];
      }
    });
  });
}

}  // namespace mxplugin
