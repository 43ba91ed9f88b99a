// The one interface the core uses to move bytes between ranks. Backends (MPI,
// NCCL) implement it and include nothing from core/.
//
// Data-plane calls block until done. Control-plane calls (used by negotiation)
// take a deadline: if peers do not take part in time they return kAborted, so a
// dead rank turns into an error instead of a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace mxplugin {

using Clock = std::chrono::steady_clock;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Global ranks of the members, in communicator rank order.
  virtual const std::vector<int>& global_ranks() const = 0;

  // recv may equal send (in place). count is in elements.
  virtual Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype,
                           ReduceOp op) = 0;
  // counts/displs in elements, one per rank.
  virtual Status Allgatherv(const void* send, int64_t send_count, void* recv,
                            const std::vector<int64_t>& counts,
                            const std::vector<int64_t>& displs, DataType dtype) = 0;
  virtual Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) = 0;
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                           const std::vector<int64_t>& send_displs, void* recv,
                           const std::vector<int64_t>& recv_counts,
                           const std::vector<int64_t>& recv_displs, DataType dtype) = 0;
  // Reduces send (sum of recv_counts elements) and leaves block `rank` in recv.
  virtual Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                               DataType dtype, ReduceOp op) = 0;
  virtual Status Barrier() = 0;

  // Control plane, bounded by `deadline`.
  virtual Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) = 0;
  // Rank 0 receives every rank's bytes (in rank order); others get nothing.
  virtual Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                             Clock::time_point deadline) = 0;
  // Rank 0's bytes replace everyone's.
  virtual Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) = 0;

  // Collective over this communicator: a communicator of `members` (global
  // ranks, all of which must belong to this one), or null on non-members.
  virtual Status CreateSubgroup(const std::vector<int>& members,
                                std::unique_ptr<Communicator>* out) = 0;
};

}  // namespace mxplugin
