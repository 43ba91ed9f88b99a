// Communicator (the data plane) over an MPI communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "backend/leaving.h"
#include "backend/mpi/mpi_comm.h"
#include "backend/mpi/peer_probe.h"

namespace mxplugin {

class MpiCommunicator : public Communicator {
 public:
  // `peers`, when given, is asked after each call whether a rank of this
  // host ended meanwhile (Note [Peers ended mid-call] in the .cc); once
  // `leaving` is set no call starts (Note [Leaving a broken world]).
  MpiCommunicator(std::shared_ptr<const MpiComm> comm, std::shared_ptr<const MpiHalfOps> half_ops,
                  std::shared_ptr<const PeerProbe> peers = nullptr, std::shared_ptr<const Leaving> leaving = nullptr)
      : comm_(std::move(comm)), half_ops_(std::move(half_ops)), peers_(std::move(peers)), leaving_(std::move(leaving)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  const std::vector<int>& global_ranks() const override { return comm_->global_ranks(); }

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

 private:
  MPI_Datatype MpiType(DataType dtype) const;
  MPI_Op MpiOp(DataType dtype, ReduceOp op) const;
  // Over three or more ranks, in rank order (Note [Fixed reduction order]
  // in ordered_reduce.cc).
  Status OrderedAllreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op);
  // Block k of `send` (counts[k] elements at displs[k]) to rank k; rank k's
  // block for this rank (`mine` elements) into slot k of `slots`.
  Status ExchangeBlocks(const char* send, const std::vector<int>& counts, const std::vector<int>& displs, int mine,
                        DataType dtype, char* slots);
  // Waits for an exchange's receive and send (pair), watching `peers`
  // (world ranks) once it takes long (Note [Exchanges that watch their peers]).
  Status AwaitExchange(MPI_Request* pair, const std::vector<int>& peers);
  Status OrderedReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                              ReduceOp op);
  // MPI's verdict on a call named `what`, failed when a local peer ended meanwhile.
  Status Checked(int rc, const char* what) const;
  // Note [Leaving a broken world]: an error for a call named `what` that must
  // not start, OK while this rank stays in its world.
  Status NotLeaving(const char* what) const;

  std::shared_ptr<const MpiComm> comm_;
  std::shared_ptr<const MpiHalfOps> half_ops_;
  std::shared_ptr<const PeerProbe> peers_;
  std::shared_ptr<const Leaving> leaving_;
  std::vector<char> scratch_;  // the ordered reductions' copies from every rank
};

}  // namespace mxplugin
