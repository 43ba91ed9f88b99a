// The Doorbell of the ranks of one host: a counter and a futex in a small
// shared-memory segment (Note [Doorbell] in host_doorbell.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "backend/doorbell.h"
#include "backend/shm/shm_segment.h"

namespace mxplugin {
namespace shm {

// The segment's layout; zeroed by the creator.
struct DoorbellWords {
  alignas(64) std::atomic<uint32_t> rings;
  alignas(64) std::atomic<uint32_t> sleepers;  // threads in Wait, host-wide
};
constexpr size_t kDoorbellBytes = 4096;
static_assert(sizeof(DoorbellWords) <= kDoorbellBytes, "the words fit their page");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "a futex needs a plain 32-bit word");

class HostDoorbell : public Doorbell {
 public:
  // `segment`: kDoorbellBytes, mapped by every rank of the host.
  explicit HostDoorbell(std::unique_ptr<Segment> segment);

  uint32_t Rings() const override;
  void Ring() override;
  void Wait(uint32_t seen, Clock::time_point until) override;

 private:
  std::unique_ptr<Segment> segment_;
  DoorbellWords* words_;
};

}  // namespace shm
}  // namespace mxplugin
