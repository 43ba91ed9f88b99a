#include "core/transfer_watchdog.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

namespace mxplugin {
namespace {

// How long a peer's host may take to answer a probe (a round trip on a
// working network).
constexpr double kProbeSeconds = 1.0;
constexpr int kExitStuck = 1;
// Note [Every reachable rank says it]: the ranks stuck in one collective
// reach their verdicts within moments of each other, and the first to end
// gets mpiexec to kill the others, maybe before they have written theirs.
// So a rank ends this long after its line, not at once.
constexpr auto kExitGrace = std::chrono::seconds(1);


}  // namespace

// Note [A verdict within the timeout]: a rank cut off from a peer must fail
// within MXPLUGIN_PEER_TIMEOUT_SECONDS of the wait's start, naming the peer,
// not a probe (and a polling period) later. So a wait for peers (this
// watch, a negotiation round) gives up early by the probe's time, the probe
// taking the rest; a short timeout gives the probe at most half of it.
double VerdictLead(double timeout_seconds) { return std::min(kProbeSeconds, timeout_seconds / 2); }

std::string CutOffText(const PeerVerdict& who, const std::string& host, double probe_seconds) {
  std::string text;
  if (!who.unreachable.empty()) {
    text = PeersText(who.unreachable) + " cannot be reached from " + host + " (no answer within " +
           std::to_string(static_cast<int>(probe_seconds * 1000)) + " ms): ";
  }
  if (!who.ended.empty()) text += EndedText(who.ended) + " (the process is gone: its probe port refuses): ";
  return text;
}

bool NamesLostPeers(const std::string& reason) {
  return reason.find(" cannot be reached from ") != std::string::npos ||
         reason.find(" ended (the process is gone") != std::string::npos;
}

TransferWatchdog::TransferWatchdog(double timeout_seconds, ReachabilityProbe probe, std::string host, int rank,
                                   std::vector<int> ranks, Logger* logger, LostPeerReport* report)
    : timeout_seconds_(timeout_seconds), probe_(std::move(probe)), host_(std::move(host)), rank_(rank),
      ranks_(std::move(ranks)), logger_(logger), report_(report) {
  if (probe_ && timeout_seconds_ > 0) {
    thread_ = std::thread([this] { Watch(); });
    // Not its creator's (the core's) name; set here, before anyone can look.
    pthread_setname_np(thread_.native_handle(), "mxplugin-watch");
  }
}

TransferWatchdog::~TransferWatchdog() { Stop(); }

void TransferWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TransferWatchdog::Begin() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_phase_ = true;
    since_ = Clock::now();
    wake = watcher_idle_;
  }
  // Only a watch waiting for a phase needs waking: one timing a phase looks
  // at the newest when its timer fires (a few times per timeout, not per phase).
  if (wake) wake_.notify_all();
}

void TransferWatchdog::End() {
  std::lock_guard<std::mutex> lock(mutex_);
  in_phase_ = false;
}

void TransferWatchdog::KeepRunning() {
  std::lock_guard<std::mutex> lock(mutex_);
  keep_running_ = true;
}

std::string TransferWatchdog::Stuck() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stuck_;
}

void TransferWatchdog::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  const double lead = VerdictLead(timeout_seconds_);
  Clock::time_point phase{};  // the phase looked at, by its start
  double probe_after = timeout_seconds_ - lead;
  while (!stop_) {
    if (!in_phase_) {
      watcher_idle_ = true;
      wake_.wait(lock, [this] { return stop_ || in_phase_; });
      watcher_idle_ = false;
      continue;
    }
    const Clock::time_point since = since_;
    if (since != phase) {
      phase = since;
      probe_after = timeout_seconds_ - lead;
    }
    const auto probe_at = since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(probe_after));
    if (Clock::now() < probe_at) {
      // Woken early by the phase's end, a new phase or the stop.
      wake_.wait_until(lock, probe_at, [this, since] { return stop_ || !in_phase_ || since_ != since; });
      continue;
    }
    lock.unlock();
    const PeerVerdict who = probe_(ranks_, lead);
    lock.lock();
    if (!in_phase_ || since_ != since) continue;  // the phase ended meanwhile
    const double waited = std::chrono::duration<double>(Clock::now() - since).count();
    std::ostringstream why;
    why << "a transfer of the data plane has not completed in " << static_cast<int>(waited + 0.5)
        << " s (MXPLUGIN_PEER_TIMEOUT_SECONDS is " << static_cast<int>(timeout_seconds_) << ")";
    if (who.empty()) {
      MXP_LOG(*logger_, kWarning, why.str() << ", though every peer's host answers from " << host_
                                            << ": a peer is stuck, or the transfer is slow; still waiting");
      probe_after += timeout_seconds_;
      continue;
    }
    stuck_ = LostContact(CutOffText(who, host_, lead) + why.str()).reason();
    if (report_ != nullptr) report_->Say(rank_, host_, who);
    if (keep_running_) return;
    const std::string line = "mxplugin: rank " + std::to_string(rank_) + ": " + stuck_ +
                             "; a transfer inside MPI cannot be abandoned, so this process ends (exit code " +
                             std::to_string(kExitStuck) + ")\n";
    ssize_t written = write(2, line.data(), line.size());
    (void)written;
    std::this_thread::sleep_for(kExitGrace);
    _exit(kExitStuck);
  }
}

}  // namespace mxplugin
