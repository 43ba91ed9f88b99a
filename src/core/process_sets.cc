// Control requests of the Core (process sets, the benchmark reference): run by
// every rank at the same point of the op order (Note [Control requests] in
// core/request.h; "Process sets" in docs/architecture.md).
#include <algorithm>
#include <future>

#include "common/codes.h"
#include "core/core.h"
#include "core/ranks_text.h"

namespace mxplugin {

Status Core::RunControl(ControlKind kind, std::vector<int64_t> args, std::function<Status()> action) {
  auto promise = std::make_shared<std::promise<Status>>();
  auto future = promise->get_future();
  Request r;
  r.meta.op = OpType::kBarrier;
  r.meta.shape = {static_cast<int64_t>(kind)};
  r.meta.shape.insert(r.meta.shape.end(), args.begin(), args.end());
  r.process_set_id = 0;
  r.enqueue_time = Clock::now();
  r.control = std::move(action);
  r.completion = std::make_shared<Completion>(1, [promise](const Status& s) { promise->set_value(s); });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Stopped()) return stop_status_;
    r.meta.name = MXP_CONTROL_PREFIX + std::to_string(control_counter_++);
    r.meta.rank = topology_.rank;
    in_flight_[0].insert(r.meta.name);
    queue_.push_back(std::move(r));
  }
  WakeLoops();
  return future.get();
}

int Core::AddProcessSet(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= topology_.size || (i > 0 && ranks[i] == ranks[i - 1])) {
      throw Error(Status::InvalidArgument("process set " + RanksText(ranks) +
                                          ": ranks must be distinct and in [0, " +
                                          std::to_string(topology_.size) + ")"));
    }
  }
  auto id = std::make_shared<int>(-1);
  Status st = RunControl(ControlKind::kAddProcessSet, std::vector<int64_t>(ranks.begin(), ranks.end()),
                         [this, ranks, id]() -> Status {
    for (const auto& kv : sets_) {
      if (kv.second->ranks == ranks) {
        return Status::InvalidArgument("a process set with ranks " + RanksText(ranks) +
                                       " already exists (id " + std::to_string(kv.first) + ")");
      }
    }
    Group group;
    Status s = world_->CreateGroup(ranks, &group);
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mutex_);
    *id = next_set_id_++;
    sets_[*id] = MakeProcessSet(ranks, std::move(group));
    return Status::Ok();
  });
  ThrowIfError(st);
  return *id;
}

bool Core::RemoveProcessSet(int id) {
  if (id == 0) return false;
  auto removed = std::make_shared<bool>(false);
  Status st = RunControl(ControlKind::kRemoveProcessSet, {id}, [this, id, removed]() -> Status {
    auto it = sets_.find(id);
    if (it == sets_.end()) return Status::Ok();
    std::unique_ptr<ProcessSet> set;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      set = std::move(it->second);
      sets_.erase(it);
    }
    for (auto& pr : set->pending) {
      Finish(pr.second, Status::InvalidArgument("process set " + std::to_string(id) + " was removed"));
    }
    *removed = true;
    return Status::Ok();
  });
  ThrowIfError(st);
  return *removed;
}

// The sets go with a stopped core: asked for one then, a rank hears why the
// core stopped (a lost peer, say), not that the set is unknown. Under mutex_.
Status Core::UnknownSet(int id) const {
  if (Stopped() && !stop_status_.ok()) return stop_status_;
  return Status::InvalidArgument("unknown process set id " + std::to_string(id));
}

std::vector<int> Core::ProcessSetRanks(int id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) throw Error(UnknownSet(id));
  return it->second->ranks;
}

int Core::ProcessSetRank(int id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = sets_.find(id);
  if (it == sets_.end()) throw Error(UnknownSet(id));
  const auto& ranks = it->second->ranks;
  auto pos = std::find(ranks.begin(), ranks.end(), topology_.rank);
  return pos == ranks.end() ? -1 : static_cast<int>(pos - ranks.begin());
}

std::vector<int> Core::ProcessSetIds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int> ids;
  for (const auto& kv : sets_) ids.push_back(kv.first);
  return ids;
}

double Core::ReferenceAllreduce(void* data, int64_t count, DataType dtype) {
  auto seconds = std::make_shared<double>(0.0);
  Status st = RunControl(ControlKind::kReferenceAllreduce, {count}, [this, data, count, dtype, seconds]() -> Status {
    auto t0 = Clock::now();
    Status s = sets_.at(0)->group.data->Allreduce(data, data, count, dtype, ReduceOp::kSum);
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  });
  ThrowIfError(st);
  return *seconds;
}

}  // namespace mxplugin
