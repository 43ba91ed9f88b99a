// Wakes the background threads of every rank on this host at once (Note
// [Doorbell] in backend/shm/host_doorbell.cc). Rung by any thread that gives
// the core something to negotiate; waited on by the core's background thread
// between negotiation rounds. A world offers one where its ranks can share
// one (World::doorbell()); without it the loop polls every cycle time.
#pragma once

#include <cstdint>

#include "backend/control_plane.h"

namespace mxplugin {

class Doorbell {
 public:
  virtual ~Doorbell() = default;
  // How many times it has rung so far; read before checking for work, then
  // passed to Wait, so that a ring in between is never missed.
  virtual uint32_t Rings() const = 0;
  // Any thread of any rank on the host.
  virtual void Ring() = 0;
  // Returns once it has rung since `seen`, or at `until`.
  virtual void Wait(uint32_t seen, Clock::time_point until) = 0;
};

}  // namespace mxplugin
