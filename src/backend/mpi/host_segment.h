// A shared-memory segment mapped by the ranks of one host, set up over MPI:
// used by the hierarchical data plane (mpi_hierarchy.cc) and the host's
// doorbell (mpi_world.cc).
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "backend/shm/shm_segment.h"
#include "common/status.h"

namespace mxplugin {

// Collective over `local` (the ranks of one host): local rank 0 creates the
// segment under `name` and runs `init` on it before any other rank can look;
// the others attach; the name is gone once all have (or have failed). Every
// rank gets the segment, or null and in *failure why its host has none (a
// rank of a host where one rank failed gets null too).
std::unique_ptr<shm::Segment> ShareHostSegment(MPI_Comm local, const std::string& name, size_t bytes,
                                               const std::function<void(char*)>& init, Status* failure);

}  // namespace mxplugin
