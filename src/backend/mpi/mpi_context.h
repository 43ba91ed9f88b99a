// Owns MPI for the process: MPI_Init/Finalize, the user-defined reduction
// ops for half types, and the topology (local/cross ranks). Must be created,
// used and destroyed on the one thread that owns MPI (the core's background thread).
#pragma once

#include <mpi.h>

#include <memory>

#include "backend/communicator.h"

namespace mxplugin {

struct MpiHalfOps {
  MPI_Datatype half_type = MPI_DATATYPE_NULL;  // 2 opaque bytes
  MPI_Op float16[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bfloat16[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool threads_multiple = false;
};

class MpiContext {
 public:
  // Initialises MPI unless the host program already did (then it must have
  // asked for MPI_THREAD_MULTIPLE). thread_multiple: ask for MULTIPLE rather
  // than FUNNELED (Note [MPI thread level] in mpi_context.cc).
  explicit MpiContext(bool thread_multiple);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  const Topology& topology() const { return topology_; }
  std::unique_ptr<Communicator> CreateWorld();
  // After a peer failure MPI may be unusable; skip the collective finalize.
  void set_skip_finalize() { skip_finalize_ = true; }

 private:
  bool owns_mpi_ = false;
  bool skip_finalize_ = false;
  Topology topology_;
  std::shared_ptr<MpiHalfOps> half_ops_;
};

}  // namespace mxplugin
