// What the Core says and does when peers are lost: the unreachable ones
// named in a failed collective's error, and the stuck-transfer watchdog's
// view for the layers above.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "core/core.h"

namespace mxplugin {
namespace {

constexpr int kProbeRetries = 3;
constexpr auto kProbeRetryGap = std::chrono::milliseconds(100);

}  // namespace

// Note [Who is unreachable]: a collective that failed for want of a peer (a
// local peer that did not come, stuck with one behind a dead link) names the
// peers cut off from this rank; probed once, at the first such failure.
Status Core::NameUnreachable(const Status& status) {
  // kInternal: an MPI call failed, maybe for a peer that ended (MPICH's own
  // words name no rank); it reads as a lost peer once the probe names one.
  const bool maybe_lost = status.code() == StatusCode::kAborted || status.code() == StatusCode::kInternal;
  if (!maybe_lost || !reach_) return status;
  const double lead = VerdictLead(config_.peer_timeout_seconds);
  PeerVerdict who;
  {
    std::lock_guard<std::mutex> lock(probe_mutex_);
    if (!probed_) {
      unreachable_ = reach_(world_ranks_, lead);
      // A killed process goes in steps (its memory, then its descriptors,
      // then its pid): an MPI error from its memory's end may come while
      // its probe port still answers. Looked at again, shortly, before the
      // verdict is kept for the later failures.
      for (int i = 0; i < kProbeRetries && unreachable_.empty(); ++i) {
        std::this_thread::sleep_for(kProbeRetryGap);
        unreachable_ = reach_(world_ranks_, lead);
      }
      probed_ = true;
    }
    who = unreachable_;
  }
  if (who.empty()) return status;
  lost_peer_report_.Say(topology_.rank, host_, who);  // Note [Lost peers as data]
  if (NamesLostPeers(status.reason())) return status;
  return LostContact(CutOffText(who, host_, lead) + status.reason());
}

std::string Core::StuckTransfer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watchdog_ ? watchdog_->Stuck() : "";
}

void Core::KeepRunningWhenStuck() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (watchdog_) watchdog_->KeepRunning();
}

bool Core::LeaveWorld(double seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  leave_requested_ = true;
  if (leaving_) leaving_->Set();  // a round being polled fails at its next poll
  lock.unlock();
  WakeLoops();
  lock.lock();
  return parked_cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return Stopped(); });
}

}  // namespace mxplugin
