#include "backend/mpi/mpi_control_plane.h"

#include <thread>

namespace mxplugin {
namespace {

// Polls a nonblocking request until it completes or the deadline passes.
// Spins briefly first (negotiation rounds are usually short), then yields.
Status WaitUntil(MPI_Request* request, Clock::time_point deadline, const char* what) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiStatus(rc, what);
    if (done) return Status::Ok();
    if (spins > 2000) {
      if (Clock::now() > deadline) {
        return Status::Aborted(std::string(what) + " timed out");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spins > 20000 ? 200 : 20));
    }
  }
}

}  // namespace

Status MpiControlPlane::AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) {
  MPI_Request request;
  Status st = MpiStatus(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                   MPI_UINT64_T, MPI_BAND, comm_->get(), &request),
                    "MPI_Iallreduce");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (bit allreduce)") : st;
}

Status MpiControlPlane::GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                                    Clock::time_point deadline) {
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(comm_->rank() == 0 ? comm_->size() : 0);
  MPI_Request request;
  Status st = MpiStatus(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_->get(), &request),
                    "MPI_Igather");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (gather sizes)");
  if (!st.ok()) return st;
  std::vector<int> displs(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) displs[i] = displs[i - 1] + sizes[i - 1];
  std::string all(comm_->rank() == 0 ? static_cast<size_t>(displs.back() + sizes.back()) : 0, '\0');
  st = MpiStatus(MPI_Igatherv(mine.data(), my_size, MPI_BYTE, &all[0], sizes.data(), displs.data(), MPI_BYTE,
                          0, comm_->get(), &request),
             "MPI_Igatherv");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (gather requests)");
  if (!st.ok() || comm_->rank() != 0) return st;
  gathered->clear();
  for (int i = 0; i < comm_->size(); ++i) gathered->push_back(all.substr(displs[i], sizes[i]));
  return Status::Ok();
}

Status MpiControlPlane::BroadcastBytes(std::string* bytes, Clock::time_point deadline) {
  int64_t n = static_cast<int64_t>(bytes->size());
  MPI_Request request;
  Status st = MpiStatus(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, comm_->get(), &request), "MPI_Ibcast");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (broadcast size)");
  if (!st.ok()) return st;
  bytes->resize(static_cast<size_t>(n));
  st = MpiStatus(MPI_Ibcast(&(*bytes)[0], static_cast<int>(n), MPI_BYTE, 0, comm_->get(), &request), "MPI_Ibcast");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (broadcast responses)") : st;
}

Status MpiControlPlane::Barrier(Clock::time_point deadline) {
  MPI_Request request;
  Status st = MpiStatus(MPI_Ibarrier(comm_->get(), &request), "MPI_Ibarrier");
  return st.ok() ? WaitUntil(&request, deadline, "barrier") : st;
}

}  // namespace mxplugin
