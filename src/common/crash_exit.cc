#include "common/crash_exit.h"

#include <unistd.h>

#include <cstring>

namespace mxplugin {

namespace {

const int kSignals[3] = {SIGSEGV, SIGBUS, SIGABRT};
volatile sig_atomic_t g_exit_code = 0;
const char* volatile g_line = "";

// Async-signal-safe: write() and _exit() only.
void ExitOnCrash(int) {
  const char* line = g_line;
  ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
  (void)ignored;
  _exit(g_exit_code);
}

void Install(int exit_code, const char* line, struct sigaction* previous) {
  g_exit_code = exit_code;
  g_line = line;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = ExitOnCrash;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, previous == nullptr ? nullptr : &previous[i]);
}

}  // namespace

CrashExit::CrashExit(int exit_code, const char* line) {
  if (exit_code == 0) return;
  Install(exit_code, line, previous_);
  armed_ = true;
}

CrashExit::~CrashExit() {
  if (!armed_) return;
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

void ArmCrashExit(int exit_code, const char* line) {
  if (exit_code != 0) Install(exit_code, line, nullptr);
}

}  // namespace mxplugin
