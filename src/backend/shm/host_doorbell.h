// The Doorbell of the ranks of one host: per rank a futex word and a count
// of cycles begun, in a small shared-memory segment (Note [Doorbell] in
// host_doorbell.cc).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/doorbell.h"
#include "backend/shm/shm_segment.h"

namespace mxplugin {
namespace shm {

// One local rank's words, a cache line of their own; the segment holds one
// per local rank, zeroed by the creator.
struct alignas(64) DoorbellSlot {
  std::atomic<uint32_t> rings;     // the futex word
  std::atomic<uint32_t> sleeping;  // 1 while its loop may sleep on it
  std::atomic<uint64_t> cycles;    // cycles its loop has begun
};
static_assert(sizeof(DoorbellSlot) == 64, "one slot a cache line");
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "a futex needs a plain 32-bit word, and peers read counts without locks");

class HostDoorbell : public Doorbell {
 public:
  static size_t SegmentBytes(int local_size) { return sizeof(DoorbellSlot) * static_cast<size_t>(local_size); }
  // `segment`: SegmentBytes(local_size), mapped by every rank of the host.
  HostDoorbell(std::unique_ptr<Segment> segment, int local_rank, int local_size);

  uint32_t Rings() const override;
  void Wake() override;
  void BeginCycle(uint64_t cycle) override;
  bool PeerAhead(uint64_t cycles) const override;
  void Wait(uint32_t seen, Clock::time_point until) override;

 private:
  DoorbellSlot& slot(int local_rank) const { return slots_[local_rank]; }
  void Ring(DoorbellSlot& slot);

  std::unique_ptr<Segment> segment_;
  DoorbellSlot* slots_;
  const int local_rank_;
  const int local_size_;
};

}  // namespace shm
}  // namespace mxplugin
