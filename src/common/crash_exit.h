// Ending a process whose crash is an expected way out (an elastic rank's
// world torn down under it), with a code and one line, rather than by the
// crash signal.
//
// Note [Crashes in MPI's start]: in an elastic world, a rank killed while
// its peers are still inside MPI_Init makes MPICH tear the world down, and
// its proxies' going closes the PMI socket the peers wait on: MPICH 5.0.2's
// PMI client then dies reading it (SIGSEGV in PMIU_cmd_read under
// PMI_Barrier, MPII_Init_thread). Nothing can
// be saved of a start whose process manager is gone, and the launcher must
// not take such an end for a crash of the host (a crash costs the host a
// cool-down). So while MPI starts, and only when the caller asks for it (an
// elastic launch: MXPLUGIN_START_CRASH_EXIT_CODE, EXIT_START_CRASHED), a
// crash signal ends the process with that code after one line; the code
// tells the launcher the rank never started, though its line may be lost
// with the proxy. The previous handlers come back when the start is over
// (CrashExit). The same start torn down under a world that could not start
// on one host (mpiexec gives up: "Launch proxy failed") ends the ranks of
// the other hosts the same way. Ranks
// whose world broke before MPI's start leave on their own earlier (Note [Leaving MPI's start] in
// mxplugin/elastic/start_guard.py); this is for the teardown that is faster.
//
// Note [Crashes while leaving]: a rank told that its world is broken hands
// its state over and exits, while its core's thread may still be inside MPI
// with peers that are leaving too: MPICH then crashes under it (SIGSEGV,
// or heap corruption and SIGABRT, within a tenth of a second of the
// launcher's word). The rank is leaving anyway, so from the moment it decides to leave a crash ends it
// with one line and a code of its own, EXIT_LEFT_CRASHED (ArmCrashExit,
// mxplugin/elastic/runner.py's _leave): it may crash before it has told the
// launcher it leaves, and a healthy host must not be left out for it: the
// code tells the launcher instead.
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
// in mxplugin_run/elastic/rank_ends.py). A crash on any other thread (MXNet's)
// goes to the handler that was there before, as without it.
#pragma once

#include <csignal>

namespace mxplugin {

// While it lives, SIGSEGV, SIGBUS and SIGABRT write `line` (static storage)
// to stderr and _exit(exit_code); exit_code 0: does nothing.
class CrashExit {
 public:
  CrashExit(int exit_code, const char* line);
  ~CrashExit();
  CrashExit(const CrashExit&) = delete;
  CrashExit& operator=(const CrashExit&) = delete;

 private:
  bool armed_ = false;
  struct sigaction previous_[3] {};
};

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

// The same for the rest of the process's life (a rank that is leaving).
void ArmCrashExit(int exit_code, const char* line);

}  // namespace mxplugin
