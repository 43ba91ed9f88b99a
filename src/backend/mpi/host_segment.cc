#include "backend/mpi/host_segment.h"

namespace mxplugin {

std::unique_ptr<shm::Segment> ShareHostSegment(MPI_Comm local, const std::string& name, size_t bytes,
                                               const std::function<void(char*)>& init, Status* failure) {
  int local_rank = 0;
  MPI_Comm_rank(local, &local_rank);
  auto segment = std::make_unique<shm::Segment>();
  Status st = local_rank == 0 ? segment->Create(name, bytes) : Status::Ok();
  std::string shared_name = local_rank == 0 ? name : std::string();
  int length = static_cast<int>(name.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, local);
  shared_name.resize(static_cast<size_t>(length));
  MPI_Bcast(&shared_name[0], length, MPI_CHAR, 0, local);
  int created = st.ok() ? 1 : 0;
  MPI_Bcast(&created, 1, MPI_INT, 0, local);
  if (local_rank != 0 && created) st = segment->Attach(shared_name, bytes);
  if (local_rank == 0 && st.ok()) init(segment->data());
  MPI_Barrier(local);
  segment->Unlink();
  int ok = st.ok() && created ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, local);
  if (ok) return segment;
  *failure = st.ok() ? Status::Internal("shared memory could not be set up by another rank of this host") : st;
  return nullptr;
}

}  // namespace mxplugin
