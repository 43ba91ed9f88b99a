// Note [Crashes in MPI's start]: in an elastic world, a rank killed while
// its peers are still inside MPI_Init makes MPICH tear the world down, and
// its proxies' going closes the PMI socket the peers wait on: MPICH 5.0.2's
// PMI client then dies reading it (SIGSEGV in PMIU_cmd_read under
// PMI_Barrier, MPII_Init_thread: cores read by gdb, issue 48). Nothing can
// be saved of a start whose process manager is gone, and the launcher must
// not take such an end for a crash of the host (a crash costs the host a
// cool-down). So while MPI starts, and only when the caller asks for it (an
// elastic launch: MXPLUGIN_START_CRASH_EXIT_CODE), a crash signal ends the
// process with that code after one line; the previous handlers come back
// when the start is over. Ranks whose world broke before MPI's start leave
// on their own earlier (Note [Leaving MPI's start] in
// mxplugin/elastic/start_guard.py); this is for the teardown that is faster.
#pragma once

#include <csignal>

namespace mxplugin {

class StartCrashExit {
 public:
  // exit_code 0: does nothing.
  explicit StartCrashExit(int exit_code);
  ~StartCrashExit();
  StartCrashExit(const StartCrashExit&) = delete;
  StartCrashExit& operator=(const StartCrashExit&) = delete;

 private:
  bool armed_ = false;
  struct sigaction previous_segv_ {};
  struct sigaction previous_bus_ {};
};

}  // namespace mxplugin
