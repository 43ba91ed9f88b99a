#include "backend/shm/host_doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

namespace mxplugin {
namespace shm {

// Note [Doorbell]: a negotiation round is a collective, so it starts only
// when every rank's background loop enters it. Polled every cycle (1 ms), an
// idle rank costs its host a round of wake-ups a millisecond (3-6 % of the
// compute of ranks that fill the cores), and a rank with work waits up to a
// cycle for its peers to notice. Instead, on one host:
//   - Each rank's loop sleeps on its own bell (a futex word, shared, not
//     private: it lives in several processes), rung by that rank's threads
//     when they give it work.
//   - Every cycle runs one round of the world's process set, so all ranks'
//     cycles go in lockstep: a loop that begins cycle n says so (its count in
//     the segment) and rings the bells of the ranks that have not begun it.
//     A woken loop begins the next cycle when some peer is ahead of it (that
//     peer waits for it in a round), when it has work, or when its idle
//     wait (Core's kIdleWait) runs out. It never begins one merely because a
//     bell rang, so peers' cycles cannot set each other off in turn.
//   - A ring calls into the kernel only when the loop may sleep: the ringer
//     increments `rings` and then reads `sleeping`, the sleeper sets
//     `sleeping` and then reads `rings` (sequentially consistent), so either
//     the sleeper sees the ring or the ringer wakes it.

namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

HostDoorbell::HostDoorbell(std::unique_ptr<Segment> segment, int local_rank, int local_size)
    : segment_(std::move(segment)),
      slots_(reinterpret_cast<DoorbellSlot*>(segment_->data())),
      local_rank_(local_rank),
      local_size_(local_size) {}

uint32_t HostDoorbell::Rings() const { return slot(local_rank_).rings.load(); }

void HostDoorbell::Ring(DoorbellSlot& s) {
  s.rings.fetch_add(1);
  if (s.sleeping.load() != 0) Futex(&s.rings, FUTEX_WAKE, INT_MAX, nullptr);
}

void HostDoorbell::Wake() { Ring(slot(local_rank_)); }

void HostDoorbell::BeginCycle(uint64_t cycle) {
  slot(local_rank_).cycles.store(cycle);
  for (int r = 0; r < local_size_; ++r) {
    if (r != local_rank_ && slot(r).cycles.load() < cycle) Ring(slot(r));
  }
}

bool HostDoorbell::PeerAhead(uint64_t cycles) const {
  for (int r = 0; r < local_size_; ++r) {
    if (r != local_rank_ && slot(r).cycles.load() > cycles) return true;
  }
  return false;
}

void HostDoorbell::Wait(uint32_t seen, Clock::time_point until) {
  DoorbellSlot& s = slot(local_rank_);
  s.sleeping.store(1);
  while (s.rings.load() == seen) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    // EAGAIN (it rang before we slept), EINTR and ETIMEDOUT all mean: look again.
    Futex(&s.rings, FUTEX_WAIT, seen, &timeout);
  }
  s.sleeping.store(0);
}

}  // namespace shm
}  // namespace mxplugin
