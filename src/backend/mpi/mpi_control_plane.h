// ControlPlane over an MPI communicator: nonblocking collectives polled
// until they finish or the deadline passes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/control_plane.h"
#include "backend/mpi/mpi_comm.h"

namespace mxplugin {

class MpiControlPlane : public ControlPlane {
 public:
  explicit MpiControlPlane(std::shared_ptr<const MpiComm> comm) : comm_(std::move(comm)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  const std::vector<int>& global_ranks() const override { return comm_->global_ranks(); }

  Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) override;
  Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                     Clock::time_point deadline) override;
  Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) override;
  Status Barrier(Clock::time_point deadline) override;

 private:
  std::shared_ptr<const MpiComm> comm_;
};

}  // namespace mxplugin
