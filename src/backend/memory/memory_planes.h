// The data plane and control plane of one in-memory group: every call is one
// meeting of the group's Rendezvous (Note [Meeting in memory]). Reductions
// combine the members in member order (common/reduce.h), each step rounded
// to the element type as MPI's pairwise reductions are, so every member gets
// the same bits.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "backend/control_plane.h"
#include "backend/memory/rendezvous.h"

namespace mxplugin {
namespace memory {

// What a job's planes did, for tests to see negotiation and fusion at work
// (a round whose requests are all cached has no gather; a fused or batched
// group of allreduces is one reduction). Counted once per meeting, by member 0.
struct ControlCounts {
  std::atomic<int64_t> bit_allreduces{0};
  std::atomic<int64_t> gathers{0};
  std::atomic<int64_t> reductions{0};  // data-plane Allreduce and AllreduceMany calls
};

// What both planes know of their group.
struct Membership {
  std::shared_ptr<Rendezvous> rendezvous;
  std::shared_ptr<ControlCounts> counts;
  int me = 0;
  std::vector<int> global_ranks;
};

class MemoryCommunicator : public Communicator {
 public:
  explicit MemoryCommunicator(Membership m) : m_(std::move(m)) {}
  int rank() const override { return m_.me; }
  int size() const override { return static_cast<int>(m_.global_ranks.size()); }
  const std::vector<int>& global_ranks() const override { return m_.global_ranks; }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
  // The whole batch in one meeting.
  Status AllreduceMany(const std::vector<Buffer>& buffers, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;

 private:
  Status Meet(const void* mine, const std::function<void(const std::vector<const void*>&)>& read, const char* what);
  Membership m_;
};

class MemoryControlPlane : public ControlPlane {
 public:
  explicit MemoryControlPlane(Membership m) : m_(std::move(m)) {}
  int rank() const override { return m_.me; }
  int size() const override { return static_cast<int>(m_.global_ranks.size()); }
  const std::vector<int>& global_ranks() const override { return m_.global_ranks; }

  Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) override;
  Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                     Clock::time_point deadline) override;
  Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) override;
  Status Barrier(Clock::time_point deadline) override;

 private:
  Membership m_;
};

}  // namespace memory
}  // namespace mxplugin
