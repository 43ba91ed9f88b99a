#include "core/transfer_watchdog.h"

#include <unistd.h>

#include <sstream>

namespace mxplugin {
namespace {

// How long a peer's host may take to answer a probe (a round trip on a
// working network) and how often a phase is looked at.
constexpr double kProbeSeconds = 1.0;
constexpr auto kCheckEvery = std::chrono::seconds(1);
constexpr int kExitStuck = 1;

}  // namespace

TransferWatchdog::TransferWatchdog(double timeout_seconds, ReachabilityProbe probe, std::string host, int rank,
                                   std::vector<int> ranks, Logger* logger)
    : timeout_seconds_(timeout_seconds), probe_(std::move(probe)), host_(std::move(host)), rank_(rank),
      ranks_(std::move(ranks)), logger_(logger) {
  if (probe_ && timeout_seconds_ > 0) thread_ = std::thread([this] { Watch(); });
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
  std::lock_guard<std::mutex> lock(mutex_);
  in_phase_ = true;
  since_ = Clock::now();
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
  Clock::time_point phase{};  // the phase looked at, by its start
  double probe_after = timeout_seconds_;
  while (!stop_) {
    wake_.wait_for(lock, kCheckEvery);
    if (stop_ || !in_phase_) continue;
    const Clock::time_point since = since_;
    if (since != phase) {
      phase = since;
      probe_after = timeout_seconds_;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - since).count();
    if (waited < probe_after) continue;
    lock.unlock();
    const std::string who = probe_(ranks_, kProbeSeconds);
    lock.lock();
    if (!in_phase_ || since_ != since) continue;  // the phase ended meanwhile
    std::ostringstream why;
    why << "a transfer of the data plane has not completed for more than " << static_cast<int>(waited)
        << " s (MXPLUGIN_PEER_TIMEOUT_SECONDS is " << static_cast<int>(timeout_seconds_) << ")";
    if (who.empty()) {
      MXP_LOG(*logger_, kWarning, why.str() << ", though every peer's host answers from " << host_
                                            << ": a peer is stuck, or the transfer is slow; still waiting");
      probe_after = waited + timeout_seconds_;
      continue;
    }
    stuck_ = "mxplugin lost contact with its peers: " + who + " cannot be reached from " + host_ +
             " (no answer within " + std::to_string(static_cast<int>(kProbeSeconds)) + " s): " + why.str();
    if (keep_running_) return;
    const std::string line = "mxplugin: rank " + std::to_string(rank_) + ": " + stuck_ +
                             "; a transfer inside MPI cannot be abandoned, so this process ends (exit code " +
                             std::to_string(kExitStuck) + ")\n";
    ssize_t written = write(2, line.data(), line.size());
    (void)written;
    _exit(kExitStuck);
  }
}

}  // namespace mxplugin
