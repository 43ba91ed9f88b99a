// Communicator over an MPI communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "backend/mpi/mpi_context.h"

namespace mxplugin {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor unless it is MPI_COMM_WORLD).
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<const MpiHalfOps> half_ops);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return world_ranks_; }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv,
                   const std::vector<int64_t>& recv_counts, const std::vector<int64_t>& recv_displs,
                   DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  Status Barrier() override;

  Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) override;
  Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                     Clock::time_point deadline) override;
  Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) override;
  Status CreateSubgroup(const std::vector<int>& members, std::unique_ptr<Communicator>* out) override;

 private:
  MPI_Datatype MpiType(DataType dtype) const;
  MPI_Op MpiOp(DataType dtype, ReduceOp op) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  std::shared_ptr<const MpiHalfOps> half_ops_;
};

}  // namespace mxplugin
