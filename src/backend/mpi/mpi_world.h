// The default World: MPI_COMM_WORLD. Starts MPI for the process unless the
// program did (MPI_Init; MPI_Finalize at the process's exit, Note [MPI ends
// with the process] in mpi_world.cc), owns the user-defined reduction ops for
// half types and finds the topology (local ranks share a host). Must be
// created, used and destroyed on the one thread that owns MPI (the core's
// background thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/mpi/mpi_comm.h"
#include "backend/mpi/mpi_control_plane.h"
#include "backend/mpi/peer_probe.h"
#include "backend/world.h"
#include "common/crash_exit.h"

namespace mxplugin {

class MpiWorld : public World {
 public:
  // Initialises MPI unless the host program already did (then it must have
  // asked for MPI_THREAD_MULTIPLE). thread_multiple: ask for MULTIPLE rather
  // than FUNNELED (Note [MPI thread level] in mpi_world.cc).
  // hierarchical: groups allreduce through shared memory within hosts where
  // they can (Note [Hierarchical allreduce]); a local peer that stops
  // answering there fails a call after `peer_timeout_seconds`.
  // world_crash_exit_code: Note [Crashes under a running world] in
  // common/crash_exit.h (0: off).
  explicit MpiWorld(bool thread_multiple, bool hierarchical = false, double peer_timeout_seconds = 120,
                    int world_crash_exit_code = 0);
  ~MpiWorld() override;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  const Topology& topology() const override { return topology_; }
  ControlPlane& control() override { return *control_; }
  // MPI_Comm_split of MPI_COMM_WORLD; the data plane is hierarchical when
  // enabled and every host runs the same number (> 1) of the members.
  Status CreateGroup(const std::vector<int>& members, Group* out) override;
  // After a peer failure MPI may be unusable: no MPI call as this world
  // ends, and no MPI_Finalize at the process's exit.
  void MarkBroken() override;
  ReachabilityProbe reachability() const override;
  std::string host() const override { return probe_->host(); }
  std::shared_ptr<Doorbell> doorbell() const override { return doorbell_; }
  std::shared_ptr<Leaving> leaving() const override { return leaving_; }

 private:
  // The members' hierarchical data plane over `comm`, or null (saying why
  // not) where it cannot be built or some member has it off; collective over
  // `comm`, the same calls on every member whatever its settings
  // (mpi_hierarchy.cc).
  std::unique_ptr<Communicator> MakeHierarchical(const std::shared_ptr<const MpiComm>& comm, std::string* why_not);
  // The host's doorbell over `local` (this host's ranks); collective over the world.
  void MakeDoorbell(MPI_Comm local);

  const bool hierarchical_;
  const double peer_timeout_seconds_;
  int groups_made_ = 0;
  bool broken_ = false;
  Topology topology_;
  std::shared_ptr<MpiHalfOps> half_ops_;
  std::unique_ptr<MpiControlPlane> control_;
  std::shared_ptr<PeerProbe> probe_;
  std::shared_ptr<Doorbell> doorbell_;  // null if some host could not make one
  // Shared with every plane made here (Note [Leaving a broken world]).
  const std::shared_ptr<Leaving> leaving_ = std::make_shared<Leaving>();
  // Armed once MPI has started, on this (the core's) thread, until the
  // world ends (Note [Crashes under a running world]).
  std::unique_ptr<ThreadCrashExit> crash_exit_;
};

// The WorldFactory of MPI worlds.
std::unique_ptr<World> MakeMpiWorld(const Config& config);

}  // namespace mxplugin
