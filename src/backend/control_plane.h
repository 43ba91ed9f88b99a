// What negotiation needs from a group of ranks: small exchanges of bytes and
// bits, each bounded by a deadline. If peers do not take part in time a call
// returns kAborted, so a dead rank turns into an error instead of a hang.
// Implemented over MPI (backend/mpi) and in memory (backend/memory); data
// travels through Communicator, never through this.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace mxplugin {

using Clock = std::chrono::steady_clock;

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Global ranks of the members, in group rank order.
  virtual const std::vector<int>& global_ranks() const = 0;

  // Every member's bits ANDed together, in place.
  virtual Status AllreduceBitwiseAnd(std::vector<uint64_t>* bits, Clock::time_point deadline) = 0;
  // Rank 0 receives every rank's bytes (in rank order); others get nothing.
  virtual Status GatherBytes(const std::string& mine, std::vector<std::string>* gathered,
                             Clock::time_point deadline) = 0;
  // Rank 0's bytes replace everyone's.
  virtual Status BroadcastBytes(std::string* bytes, Clock::time_point deadline) = 0;
  // Returns once every member has called it.
  virtual Status Barrier(Clock::time_point deadline) = 0;
};

}  // namespace mxplugin
