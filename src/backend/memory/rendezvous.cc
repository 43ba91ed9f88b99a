#include "backend/memory/rendezvous.h"

#include <algorithm>

namespace mxplugin {
namespace memory {

Liveness::Liveness(int size) : dead_(new std::atomic<bool>[size]) {
  for (int i = 0; i < size; ++i) dead_[i].store(false);
}

Rendezvous::Rendezvous(std::vector<int> members, std::shared_ptr<const Liveness> liveness)
    : members_(std::move(members)), liveness_(std::move(liveness)), next_call_(members_.size(), 0) {}

int Rendezvous::FirstDead() const {
  for (int r : members_) {
    if (!liveness_->alive(r)) return r;
  }
  return -1;
}

Status Rendezvous::Meet(int me, const void* mine,
                        const std::function<void(const std::vector<const void*>&)>& read, Clock::time_point deadline,
                        bool fail_if_peer_dead, const char* what) {
  const int n = static_cast<int>(members_.size());
  if (!liveness_->alive(members_[me])) {
    return Status::Aborted(std::string(what) + ": this rank was stopped (in-memory world)");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t call = next_call_[me]++;
  Slot& slot = slots_[call];
  if (slot.posted.empty()) slot.posted.assign(n, nullptr);
  auto withdraw = [&](const std::string& why) {
    if (slot.failure.empty()) slot.failure = why;
    slot.posted[me] = nullptr;
    cv_.notify_all();
    return Status::Aborted(slot.failure);
  };
  if (!slot.failure.empty()) return Status::Aborted(slot.failure);
  slot.posted[me] = mine;
  ++slot.arrived;
  cv_.notify_all();
  // Wakes now and then to notice killed ranks, which do not notify.
  constexpr auto kPoll = std::chrono::milliseconds(20);
  while (slot.arrived < n) {
    if (!slot.failure.empty()) return withdraw(slot.failure);
    const int dead = fail_if_peer_dead ? FirstDead() : -1;
    if (dead >= 0) return withdraw(std::string(what) + ": rank " + std::to_string(dead) + " stopped");
    const auto now = Clock::now();
    if (now >= deadline) return withdraw(std::string(what) + " timed out");
    cv_.wait_until(lock, std::min(deadline, now + kPoll));
  }
  const std::vector<const void*> all = slot.posted;
  lock.unlock();
  read(all);
  lock.lock();
  ++slot.finished_reading;
  cv_.notify_all();
  // Every member is past posting and only reading: this wait always ends.
  cv_.wait(lock, [&] { return slot.finished_reading == n; });
  if (++slot.left == n) slots_.erase(call);
  return Status::Ok();
}

}  // namespace memory
}  // namespace mxplugin
