// Where this rank sits: in the world, on its host (local), and among the
// ranks with its local rank on other hosts (cross). Every World reports one.
#pragma once

namespace mxplugin {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  // The world's transport may be called from several threads (MPI_THREAD_MULTIPLE).
  bool threads_multiple = false;
};

}  // namespace mxplugin
