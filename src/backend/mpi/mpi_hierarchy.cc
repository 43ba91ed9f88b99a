// MpiWorld's hierarchical data plane (Note [Hierarchical allreduce] in
// backend/shm/hierarchical_communicator.cc): the host's shared-memory
// segment and the cross-host communicators, set up over MPI.
#include <unistd.h>

#include <new>
#include <string>

#include "backend/mpi/host_segment.h"
#include "backend/mpi/mpi_communicator.h"
#include "backend/mpi/mpi_world.h"
#include "backend/shm/hierarchical_communicator.h"

namespace mxplugin {

std::unique_ptr<Communicator> MpiWorld::MakeHierarchical(const std::shared_ptr<const MpiComm>& comm,
                                                         std::string* why_not) {
  MPI_Comm sub = comm->get();
  const int index = groups_made_++;
  int rank = 0;
  MPI_Comm_rank(sub, &rank);
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  int local_rank = 0, local_size = 1, cross_size = 1;
  if (MPI_Comm_split_type(sub, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local) != MPI_SUCCESS) {
    *why_not = "MPI_Comm_split_type failed";
    return nullptr;
  }
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  // Worth it, and possible, only when every member wants it (each rank's
  // environment says, so they are agreed on here) and every host runs the
  // same number (> 1) of the members: then slice j of every host meets on
  // cross communicator j.
  int agreed[3] = {hierarchical_ ? 1 : 0, local_size, -local_size};
  MPI_Allreduce(MPI_IN_PLACE, agreed, 3, MPI_INT, MPI_MIN, sub);
  if (agreed[0] == 0 || agreed[1] != -agreed[2] || local_size < 2) {
    *why_not = agreed[0] == 0        ? "MXPLUGIN_HIERARCHICAL_ALLREDUCE=0"
               : local_size < 2     ? "one rank per host"
                                    : "hosts run different numbers of ranks";
    MPI_Comm_free(&local);
    return nullptr;
  }
  // The name is this process's (a world rank and pid); every member learns
  // whether all hosts have their segment.
  const std::string name = "/mxplugin." + std::to_string(topology_.rank) + "." + std::to_string(getpid()) + "." +
                           std::to_string(index);
  Status failure;
  auto segment = ShareHostSegment(local, name, shm::HierarchicalCommunicator::SegmentBytes(local_size),
                                  [](char* data) { new (data) shm::Header{}; }, &failure);
  int ok = segment ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, sub);
  // Every cross communicator lists the hosts in one order, that of their
  // first rank, so that each slice adds the hosts' sums in the same order
  // whatever the placement (Note [Fixed reduction order]).
  int host_first_rank = rank;
  MPI_Bcast(&host_first_rank, 1, MPI_INT, 0, local);
  MPI_Comm_free(&local);
  if (!ok) {
    *why_not = segment ? "shared memory could not be set up on some host" : failure.reason();
    return nullptr;
  }
  MPI_Comm_split(sub, local_rank, host_first_rank, &cross);
  MPI_Comm_size(cross, &cross_size);
  auto flat = std::make_unique<MpiCommunicator>(comm, half_ops_, probe_, leaving_);
  std::unique_ptr<Communicator> cross_comm;
  if (cross_size > 1) {
    cross_comm = std::make_unique<MpiCommunicator>(std::make_shared<const MpiComm>(cross), half_ops_, nullptr,
                                                   leaving_);
  } else {
    MPI_Comm_free(&cross);
  }
  return std::make_unique<shm::HierarchicalCommunicator>(std::move(flat), std::move(cross_comm), std::move(segment),
                                                          local_rank, local_size,
                                                          std::chrono::duration<double>(peer_timeout_seconds_));
}

}  // namespace mxplugin
