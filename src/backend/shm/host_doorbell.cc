#include "backend/shm/host_doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace mxplugin {
namespace shm {

// Note [Doorbell]: a negotiation round is a collective, so it starts only
// when every rank's background thread enters it. Polled every cycle (1 ms),
// an idle rank costs its host a round of wake-ups a millisecond, measured at
// 3-6 % of the compute of ranks that fill the cores, and a rank with work
// waits up to a cycle for peers to notice it. Instead, whoever gives a core
// work rings the host's doorbell, which wakes every rank's background thread
// there within microseconds; between rings an idle loop sleeps for long
// (Core's kIdleWait), polling only as a safety net.
//   Rings is a counter: Wait returns at once if it has moved since `seen`,
// read before the waiter looked for work, so no ring is lost. The futex
// (shared, not private: the word lives in several processes) sleeps only
// while the counter still equals `seen`. A ring calls into the kernel only
// when some thread sleeps: the ringer increments `rings` and then reads
// `sleepers`, the waiter increments `sleepers` and then reads `rings`; with
// sequentially consistent operations at least one of them sees the other's
// write, so either the waiter does not sleep or the ringer wakes it.

namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

HostDoorbell::HostDoorbell(std::unique_ptr<Segment> segment)
    : segment_(std::move(segment)), words_(reinterpret_cast<DoorbellWords*>(segment_->data())) {}

uint32_t HostDoorbell::Rings() const { return words_->rings.load(); }

void HostDoorbell::Ring() {
  words_->rings.fetch_add(1);
  if (words_->sleepers.load() > 0) Futex(&words_->rings, FUTEX_WAKE, INT_MAX, nullptr);
}

void HostDoorbell::Wait(uint32_t seen, Clock::time_point until) {
  words_->sleepers.fetch_add(1);
  while (words_->rings.load() == seen) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) break;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    timespec timeout{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    // EAGAIN (it rang before we slept), EINTR and ETIMEDOUT all mean: look again.
    Futex(&words_->rings, FUTEX_WAIT, seen, &timeout);
  }
  words_->sleepers.fetch_sub(1);
}

}  // namespace shm
}  // namespace mxplugin
