#include "backend/nccl/nccl_communicator.h"

#include <cuda_runtime.h>

#include <cstring>
#include <thread>

#include "common/half.h"

namespace mxplugin {
namespace {

// Nonblocking communicators (NCCL 2.14+) let initialisation and every later
// call be bounded by a deadline; older NCCL blocks inside the calls.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
constexpr bool kNonblocking = true;
#else
constexpr bool kNonblocking = false;
#endif

std::string Describe(ncclResult_t r, ncclComm_t comm) {
  std::string out = std::string(ncclGetErrorString(r));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') out += " (" + std::string(last) + ")";
  }
#endif
  return out;
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status::Internal(std::string(what) + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

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
    case ReduceOp::kAverage: *out = ncclAvg; return Status::Ok();
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

// Waits while `comm` reports ncclInProgress (a nonblocking call still
// running); returns its final state.
ncclResult_t Settle(ncclComm_t comm, Clock::time_point deadline) {
  ncclResult_t state = ncclInProgress;
  while (true) {
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() > deadline) return ncclInProgress;
    std::this_thread::yield();
  }
}

// How long a nonblocking call may stay in progress: long enough for lazy
// connection setup on a slow network; a dead peer shows up as an error sooner.
constexpr std::chrono::seconds kCallTimeout(300);

}  // namespace

int NcclRuntimeVersion() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

Status NcclCommunicator::CreateMany(Communicator* bootstrap, int device, const std::vector<void*>& streams,
                                    Clock::time_point deadline,
                                    std::vector<std::unique_ptr<NcclCommunicator>>* out) {
  const size_t count = streams.size();
  Status st = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!st.ok()) return st;
  std::string ids(count * sizeof(ncclUniqueId), '\0');
  if (bootstrap->rank() == 0) {
    for (size_t i = 0; i < count; ++i) {
      ncclUniqueId id;
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return Status::Internal("ncclGetUniqueId failed: " + Describe(r, nullptr));
      std::memcpy(&ids[i * sizeof(ncclUniqueId)], &id, sizeof(id));
    }
  }
  // Every rank takes part in the broadcast even if its id creation failed
  // above, so that nobody waits for it: rank 0 returned before broadcasting
  // only on its own error, which the others then see as a timeout.
  st = bootstrap->BroadcastBytes(&ids, deadline);
  if (!st.ok()) return st;
  if (ids.size() != count * sizeof(ncclUniqueId)) return Status::Internal("bad NCCL unique id broadcast");

  std::vector<ncclComm_t> comms(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    ncclUniqueId id;
    std::memcpy(&id, &ids[i * sizeof(ncclUniqueId)], sizeof(id));
    ncclResult_t r;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    r = ncclCommInitRankConfig(&comms[i], bootstrap->size(), id, bootstrap->rank(), &config);
#else
    r = ncclCommInitRank(&comms[i], bootstrap->size(), id, bootstrap->rank());
#endif
    if (r != ncclSuccess && r != ncclInProgress) {
      for (ncclComm_t c : comms) {
        if (c != nullptr) ncclCommAbort(c);
      }
      return Status::Internal("ncclCommInitRank failed on gpu(" + std::to_string(device) + "): " +
                              Describe(r, comms[i]));
    }
  }
  if (kNonblocking) {
    for (size_t i = 0; i < count; ++i) {
      ncclResult_t r = Settle(comms[i], deadline);
      if (r != ncclSuccess) {
        for (ncclComm_t c : comms) ncclCommAbort(c);
        return Status::Aborted(r == ncclInProgress
                                   ? "NCCL communicator setup did not finish in time: a peer did not join"
                                   : "NCCL communicator setup failed: " + Describe(r, comms[i]));
      }
    }
  }
  out->clear();
  for (size_t i = 0; i < count; ++i) {
    out->emplace_back(new NcclCommunicator(comms[i], bootstrap->rank(), bootstrap->size(),
                                           bootstrap->global_ranks(), device, streams[i]));
  }
  return Status::Ok();
}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return;
  // The owner has waited for this communicator's work; finalising flushes
  // NCCL's own pending operations before the resources go.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (ncclCommFinalize(comm_) == ncclInProgress || kNonblocking) {
    if (Settle(comm_, Clock::now() + std::chrono::seconds(10)) != ncclSuccess) {
      ncclCommAbort(comm_);
      return;
    }
  }
#endif
  ncclCommDestroy(comm_);
}

void NcclCommunicator::Abort() {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

Status NcclCommunicator::AsyncError() {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (aborted_) return Status::Aborted("the NCCL communicator was aborted");
  }
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) return Status::Internal("ncclCommGetAsyncError failed: " + Describe(r, comm_));
  if (state == ncclSuccess || state == ncclInProgress) return Status::Ok();
  return Status::Aborted("NCCL reports " + Describe(state, comm_) +
                         (state == ncclRemoteError || state == ncclSystemError
                              ? ": a peer process has probably died or lost its connection"
                              : ""));
}

Status NcclCommunicator::Check(ncclResult_t result, const char* what) {
  if (result == ncclInProgress) result = Settle(comm_, Clock::now() + kCallTimeout);
  if (result == ncclSuccess) return Status::Ok();
  if (result == ncclInProgress) {
    return Status::Aborted(std::string(what) + " stayed in progress for " + std::to_string(kCallTimeout.count()) +
                           " s: a peer is probably gone");
  }
  return Status::Internal(std::string(what) + " failed: " + Describe(result, comm_));
}

Status NcclCommunicator::Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t red = ncclSum;
  Status st = NcclType(dtype, &type);
  if (st.ok()) st = NcclOp(op, &red);
  if (!st.ok()) return st;
  return Check(ncclAllReduce(send, recv, static_cast<size_t>(count), type, red, comm_,
                             static_cast<cudaStream_t>(stream_)),
               "ncclAllReduce");
}

bool NcclCommunicator::ScaledSumSupported(DataType dtype) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 11, 0)
  // Integers would multiply by a truncated factor; the CPU path scales them
  // after the sum, in float64, so they keep a separate scale pass.
  ncclDataType_t type = ncclFloat32;
  return (dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
          dtype == DataType::kBFloat16) &&
         NcclType(dtype, &type).ok();
#else
  (void)dtype;
  return false;
#endif
}

Status NcclCommunicator::ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 11, 0)
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
  st = Check(ncclRedOpCreatePreMulSum(&op, &scalar, type, ncclScalarHostImmediate, comm_),
             "ncclRedOpCreatePreMulSum");
  if (!st.ok()) return st;
  st = Check(ncclAllReduce(send, recv, static_cast<size_t>(count), type, op, comm_, static_cast<cudaStream_t>(stream_)),
             "ncclAllReduce");
  // An operator may go as soon as the last call using it has returned.
  ncclRedOpDestroy(op, comm_);
  return st;
#else
  (void)send, (void)recv, (void)count, (void)dtype, (void)factor;
  return Status::Internal("this NCCL is older than 2.11 and has no pre-multiplied sum");
#endif
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
    return Check(ncclAllGather(send, recv, static_cast<size_t>(send_count), type, comm_, stream), "ncclAllGather");
  }
  // Uneven blocks: every rank broadcasts its own, all in one group.
  st = Check(ncclGroupStart(), "ncclGroupStart");
  if (!st.ok()) return st;
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < size_; ++r) {
    if (counts[r] == 0) continue;
    // Non-roots' send buffer is unused; a valid pointer keeps NCCL's checks quiet.
    ncclResult_t res = ncclBroadcast(r == rank_ ? send : At(recv, displs[r], dtype), At(recv, displs[r], dtype),
                                     static_cast<size_t>(counts[r]), type, r, comm_, stream);
    if (first == ncclSuccess && res != ncclSuccess && res != ncclInProgress) first = res;
  }
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) return Check(first, "ncclBroadcast (allgather)");
  return Check(end, "ncclGroupEnd (allgather)");
}

Status NcclCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  return Check(ncclBroadcast(buffer, buffer, static_cast<size_t>(count), type, root, comm_,
                             static_cast<cudaStream_t>(stream_)),
               "ncclBroadcast");
}

Status NcclCommunicator::Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& send_displs, void* recv,
                                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                                   DataType dtype) {
  ncclDataType_t type = ncclFloat32;
  Status st = NcclType(dtype, &type);
  if (!st.ok()) return st;
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  st = Check(ncclGroupStart(), "ncclGroupStart");
  if (!st.ok()) return st;
  ncclResult_t first = ncclSuccess;
  for (int r = 0; r < size_; ++r) {
    ncclResult_t res = ncclSuccess;
    if (send_counts[r] > 0) {
      res = ncclSend(At(send, send_displs[r], dtype), static_cast<size_t>(send_counts[r]), type, r, comm_, stream);
    }
    if (first == ncclSuccess && res != ncclSuccess && res != ncclInProgress) first = res;
    if (recv_counts[r] > 0) {
      res = ncclRecv(At(recv, recv_displs[r], dtype), static_cast<size_t>(recv_counts[r]), type, r, comm_, stream);
    }
    if (first == ncclSuccess && res != ncclSuccess && res != ncclInProgress) first = res;
  }
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) return Check(first, "ncclSend/ncclRecv (alltoall)");
  return Check(end, "ncclGroupEnd (alltoall)");
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
    return Check(ncclReduceScatter(send, recv, static_cast<size_t>(recv_counts[0]), type, red, comm_, stream),
                 "ncclReduceScatter");
  }
  // Uneven blocks: block r is reduced onto rank r, all in one group.
  st = Check(ncclGroupStart(), "ncclGroupStart");
  if (!st.ok()) return st;
  ncclResult_t first = ncclSuccess;
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    if (recv_counts[r] > 0) {
      // recv is written on rank r only.
      ncclResult_t res = ncclReduce(At(send, offset, dtype), recv,
                                    static_cast<size_t>(recv_counts[r]), type, red, r, comm_, stream);
      if (first == ncclSuccess && res != ncclSuccess && res != ncclInProgress) first = res;
    }
    offset += recv_counts[r];
  }
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) return Check(first, "ncclReduce (reducescatter)");
  return Check(end, "ncclGroupEnd (reducescatter)");
}

Status NcclCommunicator::Barrier() {
  return Status::Internal("barrier runs over MPI; the NCCL communicator carries tensors only");
}

Status NcclCommunicator::AllreduceBitwiseAnd(std::vector<uint64_t>*, Clock::time_point) {
  return Status::Internal("negotiation runs over MPI; the NCCL communicator carries tensors only");
}

Status NcclCommunicator::GatherBytes(const std::string&, std::vector<std::string>*, Clock::time_point) {
  return Status::Internal("negotiation runs over MPI; the NCCL communicator carries tensors only");
}

Status NcclCommunicator::BroadcastBytes(std::string*, Clock::time_point) {
  return Status::Internal("negotiation runs over MPI; the NCCL communicator carries tensors only");
}

Status NcclCommunicator::CreateSubgroup(const std::vector<int>&, std::unique_ptr<Communicator>*) {
  return Status::Internal("process sets build their NCCL communicators from their own MPI communicator");
}

}  // namespace mxplugin
