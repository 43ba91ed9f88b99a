// A watch on the background loop's data-plane phases.
//
// Note [Stuck transfers]: negotiation waits for peers with a deadline
// (MXPLUGIN_PEER_TIMEOUT_SECONDS), but a collective of the data plane (an
// MPI_Allreduce) can neither be bounded nor abandoned: with a peer behind a
// dead link it waits for ever, and with it the rank's training loop. So a
// watchdog thread times each data-plane phase. One that lasts as long as
// the peer timeout gets the peers probed (Note [Who is unreachable] in
// backend/mpi/peer_probe.h), the verdict in by the timeout (Note [A verdict
// within the timeout] in the .cc). When some cannot be reached, the rank is cut
// off from them for good: the watchdog writes why to stderr, naming them,
// and ends the process with exit code 1, since neither the call nor its
// thread can be freed and only an end lets the job end (mpiexec stops the
// others) rather than hang. When every peer answers, the transfer is slow
// or a peer is stuck: it warns and goes on waiting. A rank that has a
// better way out asks for the report alone (KeepRunning): an elastic rank's
// watcher thread hands its last commit over and leaves
// (mxplugin/elastic/runner.py).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/world.h"
#include "common/logging.h"
#include "core/lost_peer_report.h"

namespace mxplugin {

// How much sooner than the peer timeout a wait for peers gives up, so that
// the probe naming who is out of reach ends by the timeout (Note [A verdict
// within the timeout] in the .cc).
double VerdictLead(double timeout_seconds);

// "<who> cannot be reached from <host> (no answer within <ms> ms): ", the
// words that name peers cut off in every such error, then "<who> has ended
// (...): " for ranks whose process ended; "" when the probe found nothing.
std::string CutOffText(const PeerVerdict& who, const std::string& host, double probe_seconds);
// Whether an error's text already names peers (CutOffText's words).
bool NamesLostPeers(const std::string& reason);

class TransferWatchdog {
 public:
  // `ranks`: the world's, probed when a phase is stuck; `host`: this rank's;
  // `report` (or null) says whom a stuck phase found lost.
  TransferWatchdog(double timeout_seconds, ReachabilityProbe probe, std::string host, int rank,
                   std::vector<int> ranks, Logger* logger, LostPeerReport* report = nullptr);
  ~TransferWatchdog();
  TransferWatchdog(const TransferWatchdog&) = delete;
  TransferWatchdog& operator=(const TransferWatchdog&) = delete;

  // The background thread enters, and leaves, the data plane.
  void Begin();
  void End();
  // Report a stuck phase (Stuck()) rather than end the process. Any thread.
  void KeepRunning();
  // Why the data plane is stuck with peers out of reach; "" while it is not.
  std::string Stuck() const;
  // Ends the watch (before the world goes). Idempotent.
  void Stop();

 private:
  using Clock = std::chrono::steady_clock;
  void Watch();

  const double timeout_seconds_;
  const ReachabilityProbe probe_;
  const std::string host_;
  const int rank_;
  const std::vector<int> ranks_;
  Logger* logger_;
  LostPeerReport* report_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool in_phase_ = false;
  Clock::time_point since_;
  bool watcher_idle_ = false;  // the watch waits for a phase to begin
  bool keep_running_ = false;
  bool stop_ = false;
  std::string stuck_;
  std::thread thread_;
};

}  // namespace mxplugin
