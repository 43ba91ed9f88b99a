#include "backend/mpi/mpi_control_plane.h"

#include <thread>

namespace mxplugin {
namespace {

// Longer than any wait of a running thread between two polls (Note [A rank
// that was stopped]).
constexpr auto kNotRunning = std::chrono::seconds(1);
// How long the probe of peers that ended may take: a refusal is one round trip.
constexpr double kEndedProbeSeconds = 0.3;

}  // namespace

// Note [A rank that was stopped]: a process stopped (SIGSTOP, a frozen
// container, a suspended job) for longer than the peer timeout has been
// given up on: its peers' waits ran out and, in an elastic job, they left
// and a new world went on without it. When it is let go, this thread
// resumes where it was: about to start a round, or polling one. An MPI call
// against peers that ended crashes in MPICH within milliseconds (SIGSEGV in
// MPI_Iallreduce, SIGABRT), which Note [Frozen ranks] in
// mxplugin/elastic/runner.py only narrows. So before each MPI call this plane looks at how
// long its thread has not run (CLOCK_MONOTONIC runs on while a process is
// stopped): a round about to start after a gap of a whole wait first asks
// the peer probe (no MPI) which peers ended, and fails naming them rather
// than call MPI; a wait whose deadline passed while its thread did not run
// fails as timed out without another poll. A job paused as a whole goes on
// when its rounds start after the pause (every peer answers); one paused
// in the middle of a round for longer than the peer timeout fails, as it
// did before (raise MXPLUGIN_PEER_TIMEOUT_SECONDS for jobs that are suspended).
// A thread stopped inside an MPI call resumes there: only that window is
// left (a transfer of the data plane is one blocking call), and where MPICH
// crashes in it the rank ends with its own code and its thread's stack
// (Note [Crashes under a running world] in src/common/crash_exit.h).
Status MpiControlPlane::CheckStopped(Clock::time_point now, Clock::duration budget, const char* what) {
  if (leaving_ && leaving_->IsSet()) return LeavingStatus(what, true);
  const Clock::duration idle = now - last_run_;
  last_run_ = now;
  if (idle < budget || idle < kNotRunning || !peers_) return Status::Ok();
  Peers ended = peers_->EndedLocalPeers(comm_->global_ranks());
  if (ended.empty()) ended = peers_->Ended(comm_->global_ranks(), kEndedProbeSeconds);
  if (ended.empty()) return Status::Ok();
  const double seconds = std::chrono::duration<double>(idle).count();
  return Status::Aborted(std::string(what) + " not started: this rank did not run for " +
                         std::to_string(static_cast<int>(seconds)) + " s (stopped?), and meanwhile " +
                         EndedText(ended));
}

// Polls a nonblocking request until it completes or the deadline passes.
// Spins briefly first (negotiation rounds are usually short), then yields.
Status MpiControlPlane::WaitUntil(MPI_Request* request, Clock::time_point deadline, const char* what) {
  int done = 0;
  for (int spins = 0;; ++spins) {
    const Clock::time_point now = Clock::now();
    // Note [A rank that was stopped]: its wait ran out while it did not run.
    if (now > deadline && now - last_run_ >= kNotRunning) {
      const double seconds = std::chrono::duration<double>(now - last_run_).count();
      return Status::Aborted(std::string(what) + " timed out while this rank did not run for " +
                             std::to_string(static_cast<int>(seconds)) + " s (stopped?)");
    }
    last_run_ = now;
    // Note [Leaving a broken world]: the request is left as it is; the
    // process ends without another MPI call.
    if (leaving_ && leaving_->IsSet()) return LeavingStatus(what, true);
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

Status MpiControlPlane::AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) {
  const Clock::time_point now = Clock::now();
  Status st = CheckStopped(now, deadline - now, "negotiation (bit allreduce)");
  if (!st.ok()) return st;
  MPI_Request request;
  st = MpiStatus(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                   MPI_UINT64_T, MPI_BAND, comm_->get(), &request),
                    "MPI_Iallreduce");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (bit allreduce)") : st;
}

Status MpiControlPlane::GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                                    Clock::time_point deadline) {
  const Clock::time_point now = Clock::now();
  Status st = CheckStopped(now, deadline - now, "negotiation (gather sizes)");
  if (!st.ok()) return st;
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(comm_->rank() == 0 ? comm_->size() : 0);
  MPI_Request request;
  st = MpiStatus(MPI_Igather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_->get(), &request),
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
  const Clock::time_point now = Clock::now();
  Status st = CheckStopped(now, deadline - now, "negotiation (broadcast size)");
  if (!st.ok()) return st;
  int64_t n = static_cast<int64_t>(bytes->size());
  MPI_Request request;
  st = MpiStatus(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, comm_->get(), &request), "MPI_Ibcast");
  if (st.ok()) st = WaitUntil(&request, deadline, "negotiation (broadcast size)");
  if (!st.ok()) return st;
  bytes->resize(static_cast<size_t>(n));
  st = MpiStatus(MPI_Ibcast(&(*bytes)[0], static_cast<int>(n), MPI_BYTE, 0, comm_->get(), &request), "MPI_Ibcast");
  return st.ok() ? WaitUntil(&request, deadline, "negotiation (broadcast responses)") : st;
}

Status MpiControlPlane::Barrier(Clock::time_point deadline) {
  const Clock::time_point now = Clock::now();
  Status st = CheckStopped(now, deadline - now, "barrier");
  if (!st.ok()) return st;
  MPI_Request request;
  st = MpiStatus(MPI_Ibarrier(comm_->get(), &request), "MPI_Ibarrier");
  return st.ok() ? WaitUntil(&request, deadline, "barrier") : st;
}

}  // namespace mxplugin
