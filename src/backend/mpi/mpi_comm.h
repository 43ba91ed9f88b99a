// One MPI communicator as a group uses it: its rank, size and members' world
// ranks, shared by the group's data plane (MpiCommunicator) and control
// plane (MpiControlPlane), and freed with the last of them. Also the two
// helpers both planes need: a status from an MPI return code, and the
// reduction ops for the half types.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace mxplugin {

// MPI has no float16/bfloat16: user ops (Note [Half reductions] in
// mpi_world.cc), indexed by ReduceOp.
struct MpiHalfOps {
  MPI_Datatype half_type = MPI_DATATYPE_NULL;  // 2 opaque bytes
  MPI_Op float16[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bfloat16[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

class MpiComm {
 public:
  // Takes ownership of `comm` (never frees MPI_COMM_WORLD); errors return.
  explicit MpiComm(MPI_Comm comm);
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<int>& global_ranks() const { return world_ranks_; }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
};

// Ok, or an Internal status naming the call and MPI's reason.
Status MpiStatus(int rc, const char* what);

}  // namespace mxplugin
