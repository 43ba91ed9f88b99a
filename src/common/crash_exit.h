// Ending a process whose crash is an expected way out (an elastic rank's
// world torn down under it), with a code and one line, rather than by the
// crash signal.
//
// Note [Crashes under a running world]: MPI is not fault tolerant. A rank
// killed mid-collective (or its host cut) can make MPICH crash under a
// survivor's core thread, inside the negotiation round's MPI_Iallreduce or
// MPI_Test, or a data-plane call, before anyone has said the world is
// broken (SIGSEGV in libmpi within a tenth of a second of the peer's end);
// so can a rank stopped inside an MPI call and let go after its world ended
// (Note [A rank that was stopped] in src/backend/mpi/mpi_control_plane.cc),
// and a rank whose core's thread starts a round as its peers leave a world
// that ends for new hosts (its peers exit at the commit before it has set
// its switch, Note [Leaving a broken world] in src/backend/leaving.h).
// MPICH's own fault tolerance (MPIR_CVAR_ENABLE_FT=1) cannot be had
// instead: MPICH 5.0.2 fails an assertion in MPI_Init with it (ch4_request.h
// line 16, at any rank count). Such a survivor cannot save anything, but its
// end must say what it was: so in an elastic world a crash signal on the
// core's thread (where every MPI call runs) ends the process with one line,
// the thread's stack and a code of its own, EXIT_WORLD_CRASHED, which the
// launcher judges as it judges any crash (Note [One rule for a world's end]
// in mxplugin_run/elastic/rank_ends.py). The code says what no phase can
// (the rank's agent knows the phase it was in, Note [A rank's agent] in
// mxplugin_run/rank_agent.py): that MPI crashed on the core's thread, not
// the script's own code. Crashes in MPI's start and while a rank leaves
// need no code: the phase tells them. A crash on any other thread (MXNet's)
// goes to the handler that was there before, as without it.
#pragma once

#include <csignal>

namespace mxplugin {

// While it lives, a crash signal on the thread that made it writes `line`
// (static storage) and that thread's stack to stderr and _exit(exit_code);
// on any other thread the handler from before runs. exit_code 0, or another
// one alive: does nothing (Note [Crashes under a running world]).
class ThreadCrashExit {
 public:
  ThreadCrashExit(int exit_code, const char* line);
  ~ThreadCrashExit();
  ThreadCrashExit(const ThreadCrashExit&) = delete;
  ThreadCrashExit& operator=(const ThreadCrashExit&) = delete;

 private:
  bool armed_ = false;
};

}  // namespace mxplugin
