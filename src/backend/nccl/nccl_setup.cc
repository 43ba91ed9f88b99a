// NcclCommunicator::CreateMany: the lanes' NCCL communicators, bootstrapped
// over the process set's control plane so that every rank succeeds or
// every rank fails, within the deadline.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "backend/nccl/nccl_communicator.h"
#include "backend/nccl/nccl_describe.h"
#include "cuda/device.h"

namespace mxplugin {

Status NcclCommunicator::CreateMany(ControlPlane* bootstrap, int device, const std::vector<void*>& streams,
                                    const Status& local_error, Clock::time_point deadline,
                                    Clock::duration call_timeout, std::vector<std::unique_ptr<GpuCommunicator>>* out) {
  const size_t count = streams.size();
  Status local = local_error;
  if (local.ok()) {
    local = cuda::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  }
  // Rank 0 always broadcasts, with no ids when its own set-up failed, so the
  // ranks' MPI calls stay matched whatever happens.
  std::string ids;
  if (bootstrap->rank() == 0 && local.ok()) {
    ids.assign(count * sizeof(ncclUniqueId), '\0');
    for (size_t i = 0; i < count && local.ok(); ++i) {
      ncclUniqueId id;
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) local = Status::Internal("ncclGetUniqueId failed: " + DescribeNccl(r, nullptr));
      std::memcpy(&ids[i * sizeof(ncclUniqueId)], &id, sizeof(id));
    }
    if (!local.ok()) ids.clear();
  }
  Status st = bootstrap->BroadcastBytes(&ids, deadline);
  if (!st.ok()) return st;
  if (local.ok() && ids.size() != count * sizeof(ncclUniqueId)) {
    local = Status::Aborted("rank 0 of the process set could not create NCCL ids (see its error)");
  }
  // Agree before initialising, so that no rank waits out the deadline in
  // NCCL's set-up for a peer that already knows it cannot join.
  std::vector<uint64_t> ready{local.ok() ? 1u : 0u};
  st = bootstrap->AllreduceBitwiseAnd(&ready, deadline);
  if (!st.ok()) return st;
  if (!local.ok()) return local;
  if (ready[0] == 0) return Status::Aborted("NCCL set-up failed on another rank of the process set (see its error)");

  std::vector<std::unique_ptr<NcclCommunicator>> made;
  for (size_t i = 0; i < count && local.ok(); ++i) {
    ncclUniqueId id;
    std::memcpy(&id, &ids[i * sizeof(ncclUniqueId)], sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, bootstrap->size(), id, bootstrap->rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      local = Status::Internal("ncclCommInitRankConfig failed on gpu(" + std::to_string(device) +
                               "): " + DescribeNccl(r, comm));
    }
    if (comm != nullptr) {
      made.emplace_back(new NcclCommunicator(comm, bootstrap->rank(), bootstrap->size(), bootstrap->global_ranks(),
                                             device, streams[i], call_timeout));
    }
  }
  // Nonblocking initialisation finishes in the background: wait for it.
  for (auto& comm : made) {
    if (!local.ok()) break;
    const Clock::duration left = std::max(deadline - Clock::now(), Clock::duration::zero());
    local = comm->Settle("NCCL set-up", left);  // a peer that never joins keeps it in progress
  }

  // Every rank learns whether all succeeded; unless they did, all give up.
  std::vector<uint64_t> agreed{local.ok() ? 1u : 0u};
  st = bootstrap->AllreduceBitwiseAnd(&agreed, deadline + std::chrono::seconds(10));
  if (local.ok() && !st.ok()) local = st;
  if (local.ok() && agreed[0] == 0) {
    local = Status::Aborted("NCCL set-up failed on another rank of the process set (see its error)");
  }
  if (!local.ok()) {
    for (auto& comm : made) comm->Abort();
    return local;
  }
  out->clear();
  for (auto& comm : made) out->push_back(std::move(comm));
  return Status::Ok();
}

}  // namespace mxplugin
