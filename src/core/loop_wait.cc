// How the Core's background loop waits between cycles, and how other
// threads wake it (Note [Doorbell] in backend/shm/host_doorbell.cc).
#include <algorithm>
#include <chrono>
#include <thread>

#include "core/core.h"

namespace mxplugin {

void Core::WakeLoops() {
  wake_.notify_all();
  if (Doorbell* bell = doorbell_ring_.load()) bell->Wake();
}

// Note [Doorbell]: where every rank is on this host, a loop with nothing to
// do sleeps on its bell until it has work or a peer begins a cycle (kIdleWait
// only bounds the sleep, so that stall checks and lost peers are still
// noticed while idle); where some ranks are on other hosts, which cannot
// ring it, the loop polls every cycle time, and the bell only wakes it sooner.
void Core::WaitForWork(std::unique_lock<std::mutex>& lock) {
  constexpr double kIdleWaitMs = 20.0;
  const double wait_ms = doorbell_reaches_all_ ? std::max(config_.cycle_time_ms, kIdleWaitMs) : config_.cycle_time_ms;
  const auto until = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(wait_ms * 1000));
  if (!doorbell_) {
    wake_.wait_until(lock, until, [this] { return !queue_.empty() || shutdown_requested_ || leave_requested_; });
    return;
  }
  // Right after work more tends to follow within microseconds (the next
  // collective of a loop, a peer's half of this round): look again for a
  // moment, yielding the core to whoever wants it, before sleeping
  // (4 KB allreduce_ end to end at 2 ranks: 23 -> 18.5 us).
  constexpr auto kLookAfterWork = std::chrono::microseconds(50);
  for (;;) {
    // Read before looking, so that a ring after the look ends the wait.
    const uint32_t seen = doorbell_->Rings();
    if (!queue_.empty() || shutdown_requested_ || leave_requested_ || doorbell_->PeerAhead(cycles_) ||
        Clock::now() >= until) {
      break;
    }
    lock.unlock();
    auto nothing_new = [&] { return doorbell_->Rings() == seen && !doorbell_->PeerAhead(cycles_); };
    const auto look_until = last_work_ + kLookAfterWork;
    while (Clock::now() < look_until && nothing_new()) std::this_thread::yield();
    if (nothing_new()) doorbell_->Wait(seen, until);
    lock.lock();
  }
  doorbell_->BeginCycle(++cycles_);
}

}  // namespace mxplugin
