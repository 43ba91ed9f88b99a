#include "backend/mpi/start_crash_exit.h"

#include <unistd.h>

#include <cstring>

namespace mxplugin {

namespace {

volatile sig_atomic_t g_exit_code = 0;

// Async-signal-safe: write() and _exit() only.
void ExitOnCrash(int) {
  static const char kLine[] =
      "mxplugin: elastic: MPI's start failed here: MPICH's process manager connection broke as the world was "
      "torn down (a crash inside MPI_Init): leaving\n";
  ssize_t ignored = write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
  (void)ignored;
  _exit(g_exit_code);
}

}  // namespace

StartCrashExit::StartCrashExit(int exit_code) {
  if (exit_code == 0) return;
  g_exit_code = exit_code;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = ExitOnCrash;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_segv_);
  sigaction(SIGBUS, &action, &previous_bus_);
  armed_ = true;
}

StartCrashExit::~StartCrashExit() {
  if (!armed_) return;
  sigaction(SIGSEGV, &previous_segv_, nullptr);
  sigaction(SIGBUS, &previous_bus_, nullptr);
}

}  // namespace mxplugin
