// Whether this rank is leaving its world: set from any thread, read by the
// planes before each MPI call.
//
// Note [Leaving a broken world]: an elastic rank told that its world is
// broken hands its state over and exits; its peers do the same at about the
// same moment. Its core's thread is meanwhile in MPI (polling a negotiation
// round that a lost peer will never join, or between steps), and MPI is not
// fault tolerant: once a peer's process is gone, MPICH may crash under a
// call that touches it (SIGSEGV, heap corruption and SIGABRT, within a
// tenth of a second of the peer's end). So the rank first sets this (Core::LeaveWorld): the planes
// make no MPI call from then on (a round being polled fails at its next
// poll, a new call fails before it starts) and the core's thread parks;
// only then does the rank hand over and exit. A call already blocked in MPI
// (a data-plane transfer with a peer gone) cannot be called back: should
// MPICH crash there, the rank still ends as a leaver: it told its agent it
// leaves before it set this (Note [A rank's agent] in mxplugin_run/rank_agent.py).
#pragma once

#include <atomic>
#include <string>

#include "common/status.h"

namespace mxplugin {

class Leaving {
 public:
  void Set() { set_.store(true, std::memory_order_release); }
  bool IsSet() const { return set_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> set_{false};
};

// The one status of a call a leaving rank does not make (`started` false:
// "<what> not started: ...") or stops polling ("<what> not finished: ...").
inline Status LeavingStatus(const char* what, bool started) {
  return Status::Aborted(std::string(what) + (started ? " not finished" : " not started") +
                         ": this rank is leaving its world");
}

}  // namespace mxplugin
