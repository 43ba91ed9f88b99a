// The coordinator finding calls that cannot meet: refusals, a group whose
// ranks submitted different things, fences some rank went on without.
#include <algorithm>
#include <set>

#include "core/message_table.h"
#include "core/message_text.h"

namespace mxplugin {

using namespace message_text;  // NOLINT: this file speaks in its words

// Note [Refused calls]: a call that raises on one rank before it is
// submitted (a bad argument that only this rank passed: a wrong type, a bad
// root or splits, an unpicklable object) would leave the other ranks
// waiting for it until the stall shutdown. So the Python API submits a
// refusal in its place: an op of kind kRefusal under the call's group name,
// carrying no tensor. Once every rank has submitted something under that
// name, the refusal fails the others' call at once, naming the refusing
// ranks (no grace: a refusing rank never submits the call). When every rank
// refused, the refusals meet like any collective and complete, doing nothing.
std::vector<std::pair<std::string, std::string>> MessageTable::FindConflicts(Clock::time_point now) const {
  std::vector<std::pair<std::string, std::string>> found;
  if (!fences_.empty()) FindFenceConflicts(&found);
  for (const auto& kv : groups_) {
    // Only a group with an entry waiting past the grace, or with a refusal,
    // can be in conflict (this runs every round, so the cheap test comes first).
    bool aged = false;
    const Entry* refusal = nullptr;
    for (const auto& name : kv.second) {
      const Entry& e = entries_.at(name);
      aged = aged || std::chrono::duration<double>(now - e.first_seen).count() > config_.mismatch_grace_seconds;
      for (const auto& m : e.metas) {
        if (!m.name.empty() && m.op == OpType::kRefusal && e.count < size_) refusal = &e;
      }
    }
    if (!aged && refusal == nullptr) continue;
    // What each rank submitted under this group name, and whether an aged
    // entry waits for a rank that submitted something else instead.
    std::vector<std::set<std::string>> submitted(size_);
    for (const auto& name : kv.second) {
      const Entry& e = entries_.at(name);
      for (int r = 0; r < size_; ++r) {
        if (!e.metas[r].name.empty()) submitted[r].insert(Submission(e.metas[r]));
      }
    }
    // Not before every rank has submitted something under the name: a rank
    // still to come would find the call it is part of failed and gone, and
    // wait for the others forever.
    if (std::any_of(submitted.begin(), submitted.end(), [](const auto& s) { return s.empty(); })) continue;
    if (refusal != nullptr) {
      std::vector<int> refusing;
      std::vector<std::string> others(size_);
      for (int r = 0; r < size_; ++r) {
        if (!refusal->metas[r].name.empty()) {
          refusing.push_back(world_ranks_[r]);
          continue;
        }
        for (const auto& s : submitted[r]) others[r] += (others[r].empty() ? "" : " and ") + s;
      }
      found.emplace_back(kv.first, "The call named '" + kv.first + "' raised an error on " + RankList(refusing) +
                                       " before it was submitted there (see the error on that rank), so it fails "
                                       "on every rank: " + ValuesByRank(others, world_ranks_, false) +
                                       " fails with it.");
      continue;
    }
    // An entry past the grace that waits for a rank: that rank submitted
    // something else under the name instead (every rank has submitted).
    bool conflict = false;
    for (const auto& name : kv.second) {
      const Entry& e = entries_.at(name);
      conflict = conflict || (std::chrono::duration<double>(now - e.first_seen).count() >
                                  config_.mismatch_grace_seconds && e.count < size_);
    }
    if (!conflict) continue;
    // Each rank's submissions by kind; by name where the kinds look alike
    // (allgather's and alltoall's first steps are both an allgather of sizes).
    std::vector<std::string> per_rank(size_), named(size_);
    for (int r = 0; r < size_; ++r) {
      for (const auto& s : submitted[r]) per_rank[r] += (per_rank[r].empty() ? "" : " and ") + s;
      for (const auto& name : kv.second) {
        const RequestMeta& m = entries_.at(name).metas[r];
        if (!m.name.empty()) named[r] += (named[r].empty() ? "" : " and ") + Submission(m) + " '" + m.name + "'";
      }
    }
    std::string detail = ValuesByRank(per_rank, world_ranks_);
    if (detail.empty()) detail = ValuesByRank(named, world_ranks_);
    found.emplace_back(kv.first, "Mismatched collectives under the name '" + kv.first + "': " + detail +
                                     ". Every rank must submit the same collective, with the same number of "
                                     "tensors, under one name.");
  }
  return found;
}

// Note [Fences]: some calls are made by every rank at the same point of its
// program and block it there: DistributedTrainer.save_states() with sharded
// or PowerSGD states gathers them from every rank. Called on rank 0 alone
// (the usual `if rank == 0: save`), rank 0 waits in it while the others
// train on, and their next collectives wait for rank 0: a stall until the
// stall shutdown. So such a call first submits a fence (a barrier named
// MXP_FENCE_PREFIX + the call) after waiting for its rank's pending work. A
// rank in a fence submits nothing else until every rank has reached it, so
// a waiting entry that lacks a rank in the fence but was submitted by
// another rank means that rank went on without the fence: once every rank is
// either in the fence or has gone on, the fence and what the others
// submitted instead fail at once, on every rank, naming both. (Ranks that
// call it in another order than the others, before a collective the others
// make after it, are told the same: the point of a fence is one order.)
// Cached calls are unseen here, so while a fence waits every round is a full
// one and its plan has ranks send them in full (RoundPlan::full_rounds).
// What the ranks that went on push afterwards: Note [Diverged pushes] in diverged_pushes.cc.
void MessageTable::FindFenceConflicts(std::vector<std::pair<std::string, std::string>>* found) const {
  for (const auto& fence_name : fences_) {
    const Entry& fence = entries_.at(fence_name);
    std::vector<int> in_fence;
    std::vector<std::string> instead(size_);
    std::set<std::string> other_groups;
    for (const auto& kv : entries_) {
      const Entry& e = kv.second;
      bool lacks_fenced = false;
      for (int r = 0; r < size_ && kv.first != fence_name; ++r) {
        lacks_fenced = lacks_fenced || (!fence.metas[r].name.empty() && e.metas[r].name.empty());
      }
      if (!lacks_fenced) continue;
      for (int r = 0; r < size_; ++r) {
        if (!fence.metas[r].name.empty() || e.metas[r].name.empty()) continue;
        if (instead[r].empty()) instead[r] = Submission(e.metas[r]) + " '" + kv.first + "'";
        other_groups.insert(e.group);
      }
    }
    bool accounted = true;
    for (int r = 0; r < size_; ++r) {
      if (!fence.metas[r].name.empty()) in_fence.push_back(world_ranks_[r]);
      accounted = accounted && (!fence.metas[r].name.empty() || !instead[r].empty());
    }
    if (!accounted || other_groups.empty()) continue;
    const std::string call = fence_name.substr(std::string(MXP_FENCE_PREFIX).size());
    const std::string error = call + " must be called by every rank at the same point: " + RankList(in_fence) +
                              (in_fence.size() == 1 ? " is" : " are") + " in it, while " +
                              ValuesByRank(instead, world_ranks_, false) + " went on without it; both fail.";
    found->emplace_back(fence.group, error);
    for (const auto& g : other_groups) found->emplace_back(g, error);
  }
}

void MessageTable::FailGroup(const std::string& group, const std::string& error,
                             std::vector<std::pair<uint64_t, Response>>* ready) {
  auto g = groups_.find(group);
  if (g == groups_.end()) return;
  const std::set<std::string> names = g->second;  // Erase edits the group
  for (const auto& name : names) {
    auto it = entries_.find(name);
    Response resp;
    resp.kind = Response::Kind::kError;
    resp.name = name;
    resp.op = it->second.metas[0].op;
    for (const auto& m : it->second.metas) {
      if (!m.name.empty()) resp.op = m.op;
    }
    resp.error = error;
    ready->emplace_back(it->second.arrival, std::move(resp));
    Erase(it);
  }
}

void MessageTable::TakeConflicts(Clock::time_point now, std::vector<std::pair<uint64_t, Response>>* ready) {
  for (const auto& conflict : FindConflicts(now)) FailGroup(conflict.first, conflict.second, ready);
}

}  // namespace mxplugin
