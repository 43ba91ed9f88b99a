// A World whose ranks are threads of one process, meeting in memory
// (rendezvous.h): the real Core, negotiation included, runs at any world
// size in one process, as Gloo's tests run their ranks. For tests: the
// in-process suite (tests/test_in_process.py) builds one Core per rank on
// one MemoryJob through mxp_core_create_in_memory.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/memory/memory_planes.h"
#include "backend/memory/rendezvous.h"
#include "backend/world.h"

namespace mxplugin {
namespace memory {

// The ranks of one in-memory job; shared by their worlds. Any thread.
class MemoryJob {
 public:
  // `ranks_per_host` ranks share a (pretend) host, in rank order; <= 0: one host.
  MemoryJob(int size, int ranks_per_host);
  int size() const { return size_; }
  Topology TopologyOf(int rank) const;
  // The rank stops taking part, as a process that died: its own calls fail
  // at once; peers' data-plane calls waiting for it fail; their
  // control-plane calls wait out their deadline, as they would for a silent
  // process.
  void Kill(int rank) { liveness_->Kill(rank); }
  // The meeting point of the `index`-th group created in this job (the same
  // index on every rank, since creating groups is collective).
  std::shared_ptr<Rendezvous> GroupRendezvous(uint64_t index, const std::vector<int>& members);
  // Negotiation exchanges of every group so far.
  const std::shared_ptr<ControlCounts>& counts() const { return counts_; }

 private:
  const int size_;
  const int ranks_per_host_;
  const std::shared_ptr<Liveness> liveness_;
  const std::shared_ptr<ControlCounts> counts_ = std::make_shared<ControlCounts>();
  std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<Rendezvous>> groups_;  // kept for the job's life
};

// Rank `rank`'s world in `job`.
std::unique_ptr<World> MakeMemoryWorld(std::shared_ptr<MemoryJob> job, int rank);

}  // namespace memory
}  // namespace mxplugin
