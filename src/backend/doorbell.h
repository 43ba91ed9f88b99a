// Wakes the background loops of the ranks of one host (Note [Doorbell] in
// backend/shm/host_doorbell.cc). A world offers one where its ranks can share
// one (World::doorbell()); without it a loop polls every cycle time.
#pragma once

#include <cstdint>

#include "backend/control_plane.h"

namespace mxplugin {

class Doorbell {
 public:
  virtual ~Doorbell() = default;
  // This rank's bell: how often it has rung. Read before looking for work,
  // then passed to Wait, so that a ring in between is never missed.
  virtual uint32_t Rings() const = 0;
  // Rings this rank's bell: there is work for its loop (any thread).
  virtual void Wake() = 0;
  // This rank's loop begins its cycle number `cycle` (1, 2, ...): tells the
  // host's other ranks, and rings the bells of those that have not begun it.
  virtual void BeginCycle(uint64_t cycle) = 0;
  // Whether some rank of this host has begun more than `cycles` cycles (it
  // waits for this one in a negotiation round).
  virtual bool PeerAhead(uint64_t cycles) const = 0;
  // Returns once this rank's bell has rung since `seen`, or at `until`.
  virtual void Wait(uint32_t seen, Clock::time_point until) = 0;
};

}  // namespace mxplugin
