// Hierarchical allreduce (Note [Hierarchical allreduce]): within a host the
// ranks reduce through one shared-memory segment, across hosts only each
// local rank's slice travels, among the ranks with the same local rank. On
// one host, reduce-scatter and allgather go through the segment too (Note
// [Shared-memory reduce-scatter and allgather] in scatter_gather.cc), and so
// do broadcast and alltoall (Note [Shared-memory broadcast and alltoall] in
// one_host_copies.cc); across hosts those four, and allreduces too small to
// gain, go to the flat communicator. Built by a world
// (MpiWorld::CreateGroup) when every host runs the same number (> 1) of the
// group's ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/communicator.h"
#include "backend/shm/shm_segment.h"

namespace mxplugin {
namespace shm {

// The segment's layout: a barrier, then (from the next page) two sets of one
// slot per local rank.
struct Header {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  // Set for good by a local rank whose step failed (its cross-host
  // allreduce, a barrier timeout): every local rank then fails this call
  // and the later ones, rather than go on out of step with it.
  alignas(64) std::atomic<uint32_t> failed;
};
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(Header) <= kHeaderBytes, "the barrier fits its page");

class HierarchicalCommunicator : public Communicator {
 public:
  // Bytes per local rank per piece (measured, 2 ranks on this 2-core
  // machine, resnet50's 102 MB: 1 and 2 MiB pieces 21-23 ms, 256 and
  // 512 KiB 37-41 ms, 4 MiB before non-temporal output stores 30 ms), and
  // the segment size for `local_size` ranks.
  static constexpr int64_t kPieceBytes = 1 << 20;
  static size_t SegmentBytes(int local_size);

  // `flat`: the whole group; `cross`: the ranks with this local rank (null
  // with one host); `segment`: mapped by every local rank, header zeroed.
  // A local peer that stops answering fails a call after `timeout`.
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> cross,
                           std::unique_ptr<Segment> segment, int local_rank, int local_size,
                           std::chrono::duration<double> timeout);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  const std::vector<int>& global_ranks() const override { return flat_->global_ranks(); }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
  Status AllreduceMany(const std::vector<Buffer>& buffers, DataType dtype, ReduceOp op) override;
  bool BatchesSmallBuffers() const override { return true; }
  // On one host through the segment (scatter_gather.cc), else flat.
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override;
  // On one host through the segment (one_host_copies.cc), else flat.
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;

 private:
  // Waits until every local rank has arrived; fails after the timeout, or
  // once any local rank has failed (Header::failed).
  Status LocalBarrier();
  Status FailedOnThisHost();
  char* Slot(int set, int local_rank) const;

  std::unique_ptr<Communicator> flat_;
  std::unique_ptr<Communicator> cross_;
  std::unique_ptr<Segment> segment_;
  Header* header_;
  const int local_rank_, local_size_;
  const std::chrono::duration<double> timeout_;
  uint64_t pieces_ = 0;  // pieces done so far: which slot set the next one uses
  bool broken_ = false;  // a barrier timed out: local peers are out of step
  // This rank's slice of a piece when it does not lie in one input buffer.
  std::vector<char> own_slice_;
  std::vector<const void*> terms_;  // a slice's inputs in local-rank order
};

}  // namespace shm
}  // namespace mxplugin
