// The Communicator interface over NCCL, for device memory on one GPU.
//
// Data-plane calls only enqueue work on the communicator's stream and return:
// the caller orders its own work against that stream and learns of completion
// through an event recorded after the call (core/gpu/). Control-plane calls
// are not offered: negotiation runs over MPI, which also bootstraps NCCL.
//
// Note [NCCL and dead peers]: a collective whose peer died never finishes on
// the GPU. NCCL notices the closed connection in its proxy thread and reports
// it through ncclCommGetAsyncError (AsyncError here); Abort() then makes the
// stuck kernels return so that the ops can fail instead of hanging.
#pragma once

#include <nccl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/communicator.h"

namespace mxplugin {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `bootstrap`'s members: builds `count` NCCL communicators
  // over the same ranks on `device`, one per stream of `streams`. Rank 0 makes
  // the unique ids and `bootstrap` broadcasts them; initialisation must finish
  // by `deadline` (a peer that never joins is an error, not a hang).
  static Status CreateMany(Communicator* bootstrap, int device, const std::vector<void*>& streams,
                           Clock::time_point deadline, std::vector<std::unique_ptr<NcclCommunicator>>* out);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  int device() const { return device_; }
  void* stream() const { return stream_; }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
  // Sum with every element multiplied by `factor` first: one NCCL call where
  // the NCCL version and dtype allow it (ScaledSumSupported), else an error.
  Status ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor);
  static bool ScaledSumSupported(DataType dtype);
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override;

  Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) override;
  Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                     Clock::time_point deadline) override;
  Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) override;
  Status CreateSubgroup(const std::vector<int>& members, std::unique_ptr<Communicator>* out) override;

  // Ok while healthy; the error NCCL reports for this communicator otherwise
  // (a dead peer, a failed proxy). Callable from any thread.
  Status AsyncError();
  // Makes any stuck collective of this communicator return; later calls fail.
  // Callable from any thread; idempotent.
  void Abort();

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::vector<int> global_ranks, int device, void* stream)
      : comm_(comm), rank_(rank), size_(size), global_ranks_(std::move(global_ranks)), device_(device),
        stream_(stream) {}
  // Turns a result into a Status, waiting out ncclInProgress of a nonblocking
  // communicator; `what` names the call in the message.
  Status Check(ncclResult_t result, const char* what);

  ncclComm_t comm_;
  int rank_;
  int size_;
  std::vector<int> global_ranks_;
  int device_;
  void* stream_;
  std::mutex abort_mutex_;  // Abort() against the destructor
  bool aborted_ = false;
};

// ncclGetVersion() of the library loaded at run time.
int NcclRuntimeVersion();

}  // namespace mxplugin
