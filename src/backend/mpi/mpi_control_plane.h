// ControlPlane over an MPI communicator: nonblocking collectives polled
// until they finish or the deadline passes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/control_plane.h"
#include "backend/leaving.h"
#include "backend/mpi/mpi_comm.h"
#include "backend/mpi/peer_probe.h"

namespace mxplugin {

class MpiControlPlane : public ControlPlane {
 public:
  // `peers`, when given, is asked which peers ended after this thread did
  // not run for a whole wait (Note [A rank that was stopped] in the .cc);
  // once `leaving` is set no call touches MPI (Note [Leaving a broken world]).
  explicit MpiControlPlane(std::shared_ptr<const MpiComm> comm, std::shared_ptr<const PeerProbe> peers = nullptr,
                           std::shared_ptr<const Leaving> leaving = nullptr)
      : comm_(std::move(comm)), peers_(std::move(peers)), leaving_(std::move(leaving)) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  const std::vector<int>& global_ranks() const override { return comm_->global_ranks(); }

  Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) override;
  Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                     Clock::time_point deadline) override;
  Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) override;
  Status Barrier(Clock::time_point deadline) override;

 private:
  // Polls `request` until it completes or `deadline` passes.
  Status WaitUntil(MPI_Request* request, Clock::time_point deadline, const char* what);
  // Before an MPI call: an error naming the peers that ended while this
  // thread did not run for `budget` or longer; OK otherwise.
  Status CheckStopped(Clock::time_point now, Clock::duration budget, const char* what);

  std::shared_ptr<const MpiComm> comm_;
  std::shared_ptr<const PeerProbe> peers_;
  std::shared_ptr<const Leaving> leaving_;
  Clock::time_point last_run_ = Clock::now();  // the end of this plane's last call; MPI's thread only
};

}  // namespace mxplugin
