#include "backend/mpi/mpi_communicator.h"

#include <climits>

namespace mxplugin {
namespace {

// MPI counts are int; larger messages are split into chunks (contiguous
// collectives) or rejected (vector collectives).
constexpr int64_t kMaxChunk = INT_MAX / 2;

Status ToIntVector(const std::vector<int64_t>& in, std::vector<int>* out, const char* what) {
  out->resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] > INT_MAX) {
      return Status::InvalidArgument(std::string(what) + ": more than 2^31 elements per rank is not supported");
    }
    (*out)[i] = static_cast<int>(in[i]);
  }
  return Status::Ok();
}

}  // namespace

// Note [Peers ended mid-call]: MPI is not fault tolerant. When a rank of this
// host is killed in the middle of a collective, MPICH's shared-memory copy
// from it fails (process_vm_readv: no such process), and the others' call
// may still return success with part of the result never written, or an
// error that names no rank. So after each call the ranks of this host are
// polled (their pidfds, and a one-byte read of their memory, which goes
// first: peer_probe.cc): one that has ended fails the call as a lost peer,
// named. A rank only ends after the shutdown
// negotiated with every other, which waits for this call, so a rank that
// ended meanwhile did not end normally. Ranks on other hosts are not
// watched here: their loss shows as an error, or a stall that the peer
// probe names (Note [Who is unreachable] in peer_probe.h).
Status MpiCommunicator::Checked(int rc, const char* what) const {
  Status st = MpiStatus(rc, what);
  if (!peers_) return st;
  const Peers ended = peers_->EndedLocalPeers(comm_->global_ranks());
  if (ended.empty()) return st;
  return LostContact(EndedText(ended) + " (the process is gone) during " + what + ", whose result cannot be trusted" +
                     (st.ok() ? "" : " (" + st.reason() + ")"));
}

Status MpiCommunicator::NotLeaving(const char* what) const {
  if (!leaving_ || !leaving_->IsSet()) return Status::Ok();
  return LeavingStatus(what, false);
}

MPI_Datatype MpiCommunicator::MpiType(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16:
    case DataType::kBFloat16: return half_ops_->half_type;
  }
  throw Error(Status::InvalidArgument("unsupported dtype for MPI"));
}

MPI_Op MpiCommunicator::MpiOp(DataType dtype, ReduceOp op) const {
  int index = static_cast<int>(op);
  if (dtype == DataType::kFloat16) return half_ops_->float16[index];
  if (dtype == DataType::kBFloat16) return half_ops_->bfloat16[index];
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return MPI_SUM;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
  }
  throw Error(Status::InvalidArgument("unsupported reduce op"));
}

Status MpiCommunicator::Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                                  ReduceOp op) {
  if (size() > 2) return OrderedAllreduce(send, recv, count, dtype, op);
  const size_t esize = DataTypeSize(dtype);
  for (int64_t offset = 0; offset < count; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - offset));
    char* r = static_cast<char*>(recv) + offset * esize;
    const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + offset * esize;
    Status st = NotLeaving("MPI_Allreduce");
    if (!st.ok()) return st;
    st = Checked(MPI_Allreduce(s, r, n, MpiType(dtype), MpiOp(dtype, op), comm_->get()), "MPI_Allreduce");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status MpiCommunicator::Allgatherv(const void* send, int64_t send_count, void* recv,
                                   const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& displs, DataType dtype) {
  std::vector<int> c, d;
  Status st = NotLeaving("MPI_Allgatherv");
  if (st.ok()) st = ToIntVector(counts, &c, "allgather");
  if (st.ok()) st = ToIntVector(displs, &d, "allgather");
  if (!st.ok()) return st;
  return Checked(MPI_Allgatherv(send, static_cast<int>(send_count), MpiType(dtype), recv, c.data(),
                              d.data(), MpiType(dtype), comm_->get()),
               "MPI_Allgatherv");
}

Status MpiCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  const size_t esize = DataTypeSize(dtype);
  for (int64_t offset = 0; offset < count; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - offset));
    Status st = NotLeaving("MPI_Bcast");
    if (!st.ok()) return st;
    st = Checked(MPI_Bcast(static_cast<char*>(buffer) + offset * esize, n, MpiType(dtype), root, comm_->get()),
                      "MPI_Bcast");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status MpiCommunicator::Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                                  const std::vector<int64_t>& send_displs, void* recv,
                                  const std::vector<int64_t>& recv_counts,
                                  const std::vector<int64_t>& recv_displs, DataType dtype) {
  std::vector<int> sc, sd, rc, rd;
  Status st = NotLeaving("MPI_Alltoallv");
  if (st.ok()) st = ToIntVector(send_counts, &sc, "alltoall");
  if (st.ok()) st = ToIntVector(send_displs, &sd, "alltoall");
  if (st.ok()) st = ToIntVector(recv_counts, &rc, "alltoall");
  if (st.ok()) st = ToIntVector(recv_displs, &rd, "alltoall");
  if (!st.ok()) return st;
  return Checked(MPI_Alltoallv(send, sc.data(), sd.data(), MpiType(dtype), recv, rc.data(), rd.data(),
                             MpiType(dtype), comm_->get()),
               "MPI_Alltoallv");
}

Status MpiCommunicator::ReduceScatter(const void* send, void* recv,
                                      const std::vector<int64_t>& recv_counts, DataType dtype,
                                      ReduceOp op) {
  std::vector<int> rc;
  Status st = ToIntVector(recv_counts, &rc, "reducescatter");
  if (!st.ok()) return st;
  if (size() > 2) return OrderedReduceScatter(send, recv, recv_counts, dtype, op);
  st = NotLeaving("MPI_Reduce_scatter");
  if (!st.ok()) return st;
  return Checked(MPI_Reduce_scatter(send, recv, rc.data(), MpiType(dtype), MpiOp(dtype, op), comm_->get()),
               "MPI_Reduce_scatter");
}

}  // namespace mxplugin
