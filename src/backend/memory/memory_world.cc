#include "backend/memory/memory_world.h"

#include <algorithm>
#include <numeric>

#include "backend/memory/memory_planes.h"

namespace mxplugin {
namespace memory {

MemoryJob::MemoryJob(int size, int ranks_per_host)
    : size_(size),
      ranks_per_host_(ranks_per_host > 0 ? std::min(ranks_per_host, size) : size),
      liveness_(std::make_shared<Liveness>(size)) {
  if (size < 1) throw Error(Status::InvalidArgument("an in-memory job needs at least one rank"));
}

Topology MemoryJob::TopologyOf(int rank) const {
  const int h = ranks_per_host_;
  const int hosts = (size_ + h - 1) / h;
  Topology t;
  t.rank = rank;
  t.size = size_;
  t.local_rank = rank % h;
  t.local_size = std::min(h, size_ - (rank / h) * h);
  t.cross_rank = rank / h;
  // Hosts that have a rank with this local rank (the last host may be short).
  t.cross_size = hosts - ((size_ % h != 0 && t.local_rank >= size_ % h) ? 1 : 0);
  t.threads_multiple = true;
  return t;
}

std::shared_ptr<Rendezvous> MemoryJob::GroupRendezvous(uint64_t index, const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<Rendezvous>& r = groups_[index];
  if (!r) r = std::make_shared<Rendezvous>(members, liveness_);
  return r;
}

namespace {

Membership Member(const MemoryJob& job, std::shared_ptr<Rendezvous> rendezvous, const std::vector<int>& members,
                  int rank) {
  Membership m;
  m.rendezvous = std::move(rendezvous);
  m.counts = job.counts();
  m.me = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  m.global_ranks = members;
  return m;
}

class MemoryWorld : public World {
 public:
  MemoryWorld(std::shared_ptr<MemoryJob> job, int rank) : job_(std::move(job)), topology_(job_->TopologyOf(rank)) {
    std::vector<int> everyone(job_->size());
    std::iota(everyone.begin(), everyone.end(), 0);
    // Group 0 is the world's own control plane; CreateGroup counts from 1.
    control_ = std::make_unique<MemoryControlPlane>(Member(*job_, job_->GroupRendezvous(0, everyone), everyone, rank));
  }
  const Topology& topology() const override { return topology_; }
  ControlPlane& control() override { return *control_; }
  Status CreateGroup(const std::vector<int>& members, Group* out) override {
    const uint64_t index = ++groups_made_;
    *out = Group();
    if (std::find(members.begin(), members.end(), topology_.rank) == members.end()) return Status::Ok();
    auto rendezvous = job_->GroupRendezvous(index, members);
    out->data = std::make_unique<MemoryCommunicator>(Member(*job_, rendezvous, members, topology_.rank));
    out->control = std::make_unique<MemoryControlPlane>(Member(*job_, rendezvous, members, topology_.rank));
    return Status::Ok();
  }
  void MarkBroken() override {}

 private:
  std::shared_ptr<MemoryJob> job_;
  Topology topology_;
  std::unique_ptr<MemoryControlPlane> control_;
  uint64_t groups_made_ = 0;
};

}  // namespace

std::unique_ptr<World> MakeMemoryWorld(std::shared_ptr<MemoryJob> job, int rank) {
  if (rank < 0 || rank >= job->size()) {
    throw Error(Status::InvalidArgument("rank " + std::to_string(rank) + " is not in an in-memory job of " +
                                        std::to_string(job->size()) + " ranks"));
  }
  return std::make_unique<MemoryWorld>(std::move(job), rank);
}

}  // namespace memory
}  // namespace mxplugin
