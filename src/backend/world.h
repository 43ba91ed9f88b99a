// The ranks of a job as the core sees them: where this rank is (Topology),
// a control plane over all ranks, and groups of ranks (the world itself and
// process sets), each a data plane and a control plane over the same
// members. MPI is the default (backend/mpi/mpi_world.h); an in-memory world
// runs N ranks as N threads of one process (backend/memory/memory_world.h).
// Every call is made from the core's background thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "backend/control_plane.h"
#include "backend/doorbell.h"
#include "backend/leaving.h"
#include "backend/peers.h"
#include "common/config.h"
#include "common/topology.h"

namespace mxplugin {

// What a probe of peers found (Note [Who is unreachable] in
// backend/mpi/peer_probe.h), each empty when there is nothing to say or the
// world cannot tell.
struct PeerVerdict {
  Peers unreachable;  // on hosts that do not answer: cut off from this rank
  Peers ended;        // on hosts that answer, whose own port refuses: their process has ended
  bool empty() const { return unreachable.empty() && ended.empty(); }
};

// Probes which of `ranks` (world ranks) cannot be reached from this rank or
// have ended; takes up to `seconds`. Callable from any thread, for as long
// as it is held.
using ReachabilityProbe = std::function<PeerVerdict(const std::vector<int>& ranks, double seconds)>;

// Both planes of one group of ranks; both null on ranks outside it.
struct Group {
  std::unique_ptr<Communicator> data;
  std::unique_ptr<ControlPlane> control;
  std::string how;  // how the data plane works, for the debug log
};

class World {
 public:
  virtual ~World() = default;

  virtual const Topology& topology() const = 0;
  // All ranks of the world.
  virtual ControlPlane& control() = 0;
  // Collective over every rank of the world, in the same order everywhere:
  // the group of `members` (global ranks, in group rank order), empty on
  // ranks that are not members.
  virtual Status CreateGroup(const std::vector<int>& members, Group* out) = 0;
  // Peers may be gone (negotiation timed out): shut down without any call
  // that needs them.
  virtual void MarkBroken() = 0;
  // Tells which peers cannot be reached; null where the world cannot.
  virtual ReachabilityProbe reachability() const { return nullptr; }
  // The name of this rank's host, as the launcher placed it ("" if unknown).
  virtual std::string host() const { return ""; }
  // Rung to wake every rank of this host (Note [Doorbell]); null where the
  // world has none. Held beyond the world's life by whoever keeps it.
  virtual std::shared_ptr<Doorbell> doorbell() const { return nullptr; }
  // Set when this rank leaves its world (Note [Leaving a broken world] in
  // backend/leaving.h): its planes make no call from then on. Null where the
  // world has no such switch (its calls end by their deadlines alone).
  virtual std::shared_ptr<Leaving> leaving() const { return nullptr; }
};

// Builds this rank's world; called once, on the core's background thread
// (MPI must be initialised by the thread that will use it). Throws Error.
using WorldFactory = std::function<std::unique_ptr<World>(const Config&)>;

}  // namespace mxplugin
