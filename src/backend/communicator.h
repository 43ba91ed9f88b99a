// The data plane: the one interface the core uses to move tensors between
// ranks. Backends (MPI, NCCL, in memory) implement it and include nothing
// from core/. Calls block until done (NCCL's only until queued on its stream:
// backend/gpu_communicator.h). Negotiation uses ControlPlane instead.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/control_plane.h"  // Clock
#include "common/scale.h"
#include "common/status.h"
#include "common/types.h"

namespace mxplugin {

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
  // One allreduce over several buffers of one dtype, as if they lay end to
  // end, each input multiplied by its buffer's prescale before the
  // reduction and each result by its postscale after. The default
  // prescales each input into its recv, reduces the buffers one by one and
  // scales each result in place; a backend that pays per call overrides it
  // (shared memory: two barriers per piece, and a part piece at the end of
  // every buffer) and may fold the scaling into the copies it makes anyway
  // (a pass over memory saved for each).
  struct Buffer {
    const void* send;  // may equal recv
    void* recv;
    int64_t count;  // elements
    double postscale = 1.0;
    double prescale = 1.0;
  };
  virtual Status AllreduceMany(const std::vector<Buffer>& buffers, DataType dtype, ReduceOp op) {
    for (const Buffer& b : PrescaledIntoRecv(buffers, dtype)) {
      Status st = Allreduce(b.send, b.recv, b.count, dtype, op);
      if (!st.ok()) return st;
      ScaleInPlace(b.recv, b.count, dtype, b.postscale);
    }
    return Status::Ok();
  }
  // `buffers` with each prescaled input written to its recv, which it then
  // sends from (prescale 1): for backends that do not fold the prescale.
  static std::vector<Buffer> PrescaledIntoRecv(const std::vector<Buffer>& buffers, DataType dtype) {
    std::vector<Buffer> out = buffers;
    for (Buffer& b : out) {
      if (b.prescale == 1.0) continue;
      CopyAndScale(b.recv, b.send, b.count, dtype, b.prescale);
      b.send = b.recv;
      b.prescale = 1.0;
    }
    return out;
  }
  // Whether AllreduceMany of many small buffers costs about what one buffer
  // of their total size costs (shared memory walks them as one byte range):
  // the executor then hands it small tensors where they lie rather than
  // copy them into a fusion buffer and out again.
  virtual bool BatchesSmallBuffers() const { return false; }
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
};

}  // namespace mxplugin
