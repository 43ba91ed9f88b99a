#include "backend/mpi/mpi_communicator.h"

#include <climits>
#include <numeric>
#include <thread>

namespace mxplugin {
namespace {

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Internal(std::string(what) + " failed: " + std::string(text, len));
}

// Polls a nonblocking request until it completes or the deadline passes.
// Spins briefly first (negotiation rounds are usually short), then yields.
Status WaitUntil(MPI_Request* request, Clock::time_point deadline, const char* what) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return Check(rc, what);
    if (done) return Status::Ok();
    if (spins > 2000) {
      if (Clock::now() > deadline) {
        return Status::Aborted(std::string(what) + " timed out");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 200 : 20));
    }
  }
}

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

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::shared_ptr<const MpiHalfOps> half_ops)
    : comm_(comm), half_ops_(std::move(half_ops)) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Group group, world_group;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> local(size_);
  std::iota(local.begin(), local.end(), 0);
  world_ranks_.resize(size_);
  MPI_Group_translate_ranks(group, size_, local.data(), world_group, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
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
  const size_t esize = DataTypeSize(dtype);
  for (int64_t offset = 0; offset < count; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - offset));
    char* r = static_cast<char*>(recv) + offset * esize;
    const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + offset * esize;
    Status st = Check(MPI_Allreduce(s, r, n, MpiType(dtype), MpiOp(dtype, op), comm_), "MPI_Allreduce");
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status MpiCommunicator::Allgatherv(const void* send, int64_t send_count, void* recv,
                                   const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& displs, DataType dtype) {
  std::vector<int> c, d;
  Status st = ToIntVector(counts, &c, "allgather");
  if (st.ok()) st = ToIntVector(displs, &d, "allgather");
  if (!st.ok()) return st;
  return Check(MPI_Allgatherv(send, static_cast<int>(send_count), MpiType(dtype), recv, c.data(),
                              d.data(), MpiType(dtype), comm_),
               "MPI_Allgatherv");
}

Status MpiCommunicator::Broadcast(void* buffer, int64_t count, DataType dtype, int root) {
  const size_t esize = DataTypeSize(dtype);
  for (int64_t offset = 0; offset < count; offset += kMaxChunk) {
    int n = static_cast<int>(std::min(kMaxChunk, count - offset));
    Status st = Check(MPI_Bcast(static_cast<char*>(buffer) + offset * esize, n, MpiType(dtype), root, comm_),
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
  Status st = ToIntVector(send_counts, &sc, "alltoall");
  if (st.ok()) st = ToIntVector(send_displs, &sd, "alltoall");
  if (st.ok()) st = ToIntVector(recv_counts, &rc, "alltoall");
  if (st.ok()) st = ToIntVector(recv_displs, &rd, "alltoall");
  if (!st.ok()) return st;
  return Check(MPI_Alltoallv(send, sc.data(), sd.data(), MpiType(dtype), recv, rc.data(), rd.data(),
                             MpiType(dtype), comm_),
               "MPI_Alltoallv");
}

Status MpiCommunicator::ReduceScatter(const void* send, void* recv,
                                      const std::vector<int64_t>& recv_counts, DataType dtype,
                                      ReduceOp op) {
  std::vector<int> rc;
  Status st = ToIntVector(recv_counts, &rc, "reducescatter");
  if (!st.ok()) return st;
  return Check(MPI_Reduce_scatter(send, recv, rc.data(), MpiType(dtype), MpiOp(dtype, op), comm_),
               "MPI_Reduce_scatter");
}

Status MpiCommunicator::Barrier() { return Check(MPI_Barrier(comm_), "MPI_Barrier"); }

Status MpiCommunicator::AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) {
  MPI_Request request;
  Status st = Check(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                   MPI_UINT64_T, MPI_BAND, comm_, &request),
                    "MPI_Iallreduce");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (bit allreduce)") : st;
}

Status MpiCommunicator::GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                                    Clock::time_point deadline) {
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(rank_ == 0 ? size_ : 0);
  MPI_Request request;
  Status st = Check(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_, &request),
                    "MPI_Igather");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (gather sizes)");
  if (!st.ok()) return st;
  std::vector<int> displs(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) displs[i] = displs[i - 1] + sizes[i - 1];
  std::string all(rank_ == 0 ? static_cast<size_t>(displs.back() + sizes.back()) : 0, '\0');
  st = Check(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, &all[0], sizes.data(), displs.data(), MPI_BYTE,
                          0, comm_, &request),
             "MPI_Igatherv");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (gather requests)");
  if (!st.ok() || rank_ != 0) return st;
  gathered->clear();
  for (int i = 0; i < size_; ++i) gathered->push_back(all.substr(displs[i], sizes[i]));
  return Status::Ok();
}

Status MpiCommunicator::BroadcastBytes(std::string* bytes, Clock::time_point deadline) {
  int64_t n = static_cast<int64_t>(bytes->size());
  MPI_Request request;
  Status st = Check(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, comm_, &request), "MPI_Ibcast");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (broadcast size)");
  if (!st.ok()) return st;
  bytes->resize(static_cast<size_t>(n));
  st = Check(MPI_Ibcast(&(*bytes)[0], static_cast<int>(n), MPI_BYTE, 0, comm_, &request), "MPI_Ibcast");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (broadcast responses)") : st;
}

Status MpiCommunicator::CreateSubgroup(const std::vector<int>& members,
                                       std::unique_ptr<Communicator>* out) {
  int color = MPI_UNDEFINED;
  int key = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == world_ranks_[rank_]) {
      color = 1;
      key = static_cast<int>(i);
    }
  }
  MPI_Comm sub = MPI_COMM_NULL;
  Status st = Check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
  if (!st.ok()) return st;
  out->reset(sub == MPI_COMM_NULL ? nullptr : new MpiCommunicator(sub, half_ops_));
  return Status::Ok();
}

}  // namespace mxplugin
