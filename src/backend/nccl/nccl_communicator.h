// The Communicator interface over NCCL, for device memory on one GPU.
//
// Data-plane calls only enqueue work on the communicator's stream and return:
// the caller orders its own work against that stream and learns of completion
// through an event recorded after the call (core/gpu_executor.h). Negotiation
// runs over the process set's ControlPlane (MPI), which also bootstraps NCCL.
//
// Note [NCCL and dead peers]: a collective whose peer died never finishes on
// the GPU. NCCL notices a closed network connection in its proxy thread and
// reports it through ncclCommGetAsyncError (AsyncError here); Abort() then
// makes the stuck kernels return so that the ops can fail instead of hanging.
// Communicators are nonblocking: every call returns at once (or reports
// ncclInProgress, which is polled with a deadline), and each call runs under
// the communicator's lock, released between polls, so Abort() from another
// thread never frees a communicator in the middle of a call.
#pragma once

#include <nccl.h>

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "mxplugin's NCCL backend needs NCCL 2.14 or newer (nonblocking communicators)"
#endif

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/gpu_communicator.h"

namespace mxplugin {

class NcclCommunicator : public GpuCommunicator {
 public:
  // A GpuCommunicatorFactory: rank 0 makes the unique ids and `bootstrap`
  // broadcasts them; the ranks agree that everyone can go on before NCCL's
  // set-up and again after it, so all fail together (with the local reason,
  // or saying a peer failed).
  static Status CreateMany(ControlPlane* bootstrap, int device, const std::vector<void*>& streams,
                           const Status& local_error, Clock::time_point deadline, Clock::duration call_timeout,
                           std::vector<std::unique_ptr<GpuCommunicator>>* out);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  int device() const { return device_; }
  void* stream() const override { return stream_; }

  Status Allreduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) override;
  // One NCCL call (ncclRedOpCreatePreMulSum) for the floating-point types;
  // the factor is given in the element type (the executor pre-multiplies
  // float32 and float64 only: Note [Pre-multiplied sums] in core/gpu_launch.cc).
  Status ScaledSum(const void* send, void* recv, int64_t count, DataType dtype, double factor) override;
  bool ScaledSumSupported(DataType dtype) const override;
  Status Allgatherv(const void* send, int64_t send_count, void* recv, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& displs, DataType dtype) override;
  Status Broadcast(void* buffer, int64_t count, DataType dtype, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_counts,
                   const std::vector<int64_t>& send_displs, void* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs, DataType dtype) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts, DataType dtype,
                       ReduceOp op) override;

  // The error NCCL reports for this communicator (a dead peer, a failed proxy).
  Status AsyncError() override;
  void Abort() override;

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int size, std::vector<int> global_ranks, int device, void* stream,
                   Clock::duration call_timeout)
      : comm_(comm), rank_(rank), size_(size), global_ranks_(std::move(global_ranks)), device_(device),
        stream_(stream), call_timeout_(call_timeout) {}
  // Runs `calls` (NCCL calls on this communicator, returning the first
  // failure) under the lock, then waits out ncclInProgress; `what` names
  // the operation in errors.
  Status Run(const char* what, const std::function<ncclResult_t()>& calls);
  // Polls until the communicator leaves ncclInProgress, taking the lock for
  // each poll only.
  Status Settle(const char* what, Clock::duration timeout);

  ncclComm_t comm_;
  int rank_;
  int size_;
  std::vector<int> global_ranks_;
  int device_;
  void* stream_;
  Clock::duration call_timeout_;
  std::mutex mutex_;  // every NCCL call on comm_, and aborted_
  bool aborted_ = false;
};

}  // namespace mxplugin
