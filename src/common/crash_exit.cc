#include "common/crash_exit.h"

#include <execinfo.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace mxplugin {

namespace {

const int kSignals[3] = {SIGSEGV, SIGBUS, SIGABRT};

// `handler` for the three crash signals; the ones before into `previous`
// (three of them) unless null.
void InstallHandler(void (*handler)(int), struct sigaction* previous) {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, previous == nullptr ? nullptr : &previous[i]);
}

// ThreadCrashExit's: the thread it watches, and the handlers from before
// that every other thread's crash goes to.
std::atomic<bool> g_thread_armed{false};
pthread_t g_thread;
volatile sig_atomic_t g_thread_exit_code = 0;
const char* volatile g_thread_line = "";
struct sigaction g_thread_previous[3];
const int kMaxFrames = 64;

void ExitOnThreadCrash(int sig) {
  if (!pthread_equal(pthread_self(), g_thread)) {
    // Another thread's crash: the handler from before takes it. The signal
    // is blocked while this runs, so raise() delivers it once this returns,
    // to that handler (or the default action).
    for (int i = 0; i < 3; ++i) {
      if (kSignals[i] == sig) sigaction(sig, &g_thread_previous[i], nullptr);
    }
    raise(sig);
    return;
  }
  const char* line = g_thread_line;
  ssize_t ignored = write(STDERR_FILENO, line, std::strlen(line));
  void* frames[kMaxFrames];
  // backtrace() was called once when armed, so that its library is loaded
  // already (loading it here would not be safe in a signal handler).
  backtrace_symbols_fd(frames, backtrace(frames, kMaxFrames), STDERR_FILENO);
  (void)ignored;
  _exit(g_thread_exit_code);
}

}  // namespace

ThreadCrashExit::ThreadCrashExit(int exit_code, const char* line) {
  bool expected = false;
  if (exit_code == 0 || !g_thread_armed.compare_exchange_strong(expected, true)) return;
  void* frames[1];
  backtrace(frames, 1);
  g_thread = pthread_self();
  g_thread_exit_code = exit_code;
  g_thread_line = line;
  InstallHandler(ExitOnThreadCrash, g_thread_previous);
  armed_ = true;
}

ThreadCrashExit::~ThreadCrashExit() {
  if (!armed_) return;
  for (int i = 0; i < 3; ++i) {
    // Only where this handler is still the one (MXNet may have put its own).
    struct sigaction now;
    sigaction(kSignals[i], nullptr, &now);
    if (now.sa_handler == ExitOnThreadCrash) sigaction(kSignals[i], &g_thread_previous[i], nullptr);
  }
  g_thread_armed = false;
}

}  // namespace mxplugin
