#include "core/message_table.h"

#include <algorithm>
#include <sstream>

#include "common/codes.h"

namespace mxplugin {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

std::string RankList(const std::vector<int>& ranks) {
  std::ostringstream s;
  s << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) s << (i ? ", " : "") << ranks[i];
  return s.str();
}

// "float32 on ranks 0, 2; float16 on rank 1" (values[r] is rank r's, in
// order of first appearance; an empty value leaves its rank out); with
// `only_if_different`, "" when all values agree.
std::string ValuesByRank(const std::vector<std::string>& values, const std::vector<int>& global_ranks,
                         bool only_if_different = true) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;
  for (size_t r = 0; r < values.size(); ++r) {
    if (values[r].empty()) continue;
    auto it = std::find_if(by_value.begin(), by_value.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == by_value.end()) {
      by_value.push_back({values[r], {global_ranks[r]}});
    } else {
      it->second.push_back(global_ranks[r]);
    }
  }
  if (by_value.size() <= (only_if_different ? 1u : 0u)) return "";
  std::ostringstream s;
  for (size_t i = 0; i < by_value.size(); ++i) {
    s << (i ? "; " : "") << by_value[i].first << " on " << RankList(by_value[i].second);
  }
  return s.str();
}

template <typename Describe>
std::string Disagreement(const std::vector<RequestMeta>& metas, const std::vector<int>& global_ranks,
                         Describe describe) {
  std::vector<std::string> values;
  for (const auto& m : metas) values.push_back(describe(m));
  return ValuesByRank(values, global_ranks);
}

// What a rank submitted under a group name, for conflict messages.
std::string Submission(const RequestMeta& m) {
  std::string s = OpTypeName(m.op);
  if (m.group_size > 1) s += " (a group of " + std::to_string(m.group_size) + " tensors)";
  return s;
}

std::string Trailing(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "scalar";
  return "rank-" + std::to_string(shape.size()) + " with trailing dims " +
         ShapeText(std::vector<int64_t>(shape.begin() + 1, shape.end()));
}

}  // namespace

void MessageTable::Add(const RequestMeta& meta, Clock::time_point now) {
  auto it = entries_.find(meta.name);
  if (it == entries_.end()) {
    Entry e;
    e.metas.resize(size_);
    e.first_seen = now;
    e.last_warning = now;
    e.arrival = next_arrival_++;
    e.group = meta.group.empty() ? meta.name : meta.group;
    groups_[e.group].insert(meta.name);
    it = entries_.emplace(meta.name, std::move(e)).first;
    if (meta.op == OpType::kBarrier && meta.name.rfind(MXP_FENCE_PREFIX, 0) == 0) fences_.insert(meta.name);
  }
  Entry& e = it->second;
  if (meta.rank < 0 || meta.rank >= size_ || !e.metas[meta.rank].name.empty()) return;
  e.metas[meta.rank] = meta;
  ++e.count;
}

std::string MessageTable::MissingRanks(const Entry& entry) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    if (entry.metas[r].name.empty()) missing.push_back(world_ranks_[r]);
  }
  return RankList(missing);
}

Response MessageTable::Validate(const std::string& name, const Entry& entry) const {
  Response resp;
  resp.name = name;
  const auto& metas = entry.metas;
  resp.op = metas[0].op;
  resp.priority = metas[0].priority;
  for (const auto& m : metas) resp.priority = std::max(resp.priority, m.priority);

  auto fail = [&](const std::string& what, const std::string& detail) {
    resp.kind = Response::Kind::kError;
    resp.error = "Mismatched " + what + " for tensor '" + name + "': " + detail +
                 ". Every rank must submit the same collective with the same " + what +
                 " under this name.";
    return resp;
  };
  std::string d;
  if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return std::string(OpTypeName(m.op)); })).empty())
    return fail("operation", d);
  if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return std::to_string(m.group_size) + " tensor(s) in the call"; })).empty())
    return fail("group size", d);
  if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) {
         // Ranks use their own GPUs; only CPU against GPU is a disagreement.
         return std::string(m.device == kCpuDevice ? "cpu" : "gpu");
       })).empty())
    return fail("device", d);
  if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return std::string(DataTypeName(m.dtype)); })).empty())
    return fail("dtype", d);
  const OpType op = metas[0].op;
  if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
    // The ops the callers asked for: Average became a Sum with a 1/size
    // factor in Core::Enqueue, which would otherwise surface as a postscale
    // factor nobody set.
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return std::string(ReduceOpName(m.requested_op)); })).empty())
      return fail("reduce op", d);
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { std::ostringstream s; s.precision(17); s << m.prescale; return s.str(); })).empty())
      return fail("prescale factor", d);
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { std::ostringstream s; s.precision(17); s << m.postscale; return s.str(); })).empty())
      return fail("postscale factor", d);
  }
  if (op == OpType::kBroadcast) {
    if (!(d = Disagreement(metas, world_ranks_, [&](const RequestMeta& m) { return "root " + std::to_string(m.root_rank); })).empty())
      return fail("root rank", d);
  }
  if (op == OpType::kAllgather || op == OpType::kAlltoall) {
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return Trailing(m.shape); })).empty())
      return fail("shape", d);
  } else if (op == OpType::kBarrier) {  // a user's barrier has an empty shape; a control request, its call
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return ControlText(m.shape); })).empty()) {
      resp.kind = Response::Kind::kError;
      resp.error = "Mismatched control calls for '" + name + "': " + d +
                   ". Every rank must add and remove the same process sets, in the same order.";
      return resp;
    }
  } else {
    if (!(d = Disagreement(metas, world_ranks_, [](const RequestMeta& m) { return ShapeText(m.shape); })).empty())
      return fail("shape", d);
  }
  if (op == OpType::kAllgather) {
    for (const auto& m : metas) resp.sizes.push_back(m.shape.empty() ? 1 : m.shape[0]);
  }
  if (op == OpType::kAlltoall) {
    for (const auto& m : metas) {
      if (static_cast<int>(m.splits.size()) != size_) {
        return fail("splits", "rank " + std::to_string(world_ranks_[m.rank]) + " gave " +
                                  std::to_string(m.splits.size()) + " splits for " +
                                  std::to_string(size_) + " ranks");
      }
      resp.sizes.insert(resp.sizes.end(), m.splits.begin(), m.splits.end());
    }
  }
  return resp;
}

MessageTable::Entries::iterator MessageTable::Erase(Entries::iterator it) {
  fences_.erase(it->first);
  auto g = groups_.find(it->second.group);
  if (g != groups_.end()) {
    g->second.erase(it->first);
    if (g->second.empty()) groups_.erase(g);
  }
  return entries_.erase(it);
}

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
// one and its plan has ranks send them in full (RoundPlan::fence_waiting).
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

void MessageTable::TakeReady(Clock::time_point now, std::vector<Response>* out) {
  std::vector<std::pair<uint64_t, Response>> ready;
  std::vector<std::pair<std::string, std::string>> failed_groups;  // (group, error)
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    double age = std::chrono::duration<double>(now - e.first_seen).count();
    if (e.count == size_) {
      Response resp = Validate(it->first, e);
      if (resp.kind == Response::Kind::kError) failed_groups.emplace_back(e.group, resp.error);
      ready.emplace_back(e.arrival, std::move(resp));
      it = Erase(it);
      continue;
    }
    if (config_.stall_shutdown_seconds > 0 && age > config_.stall_shutdown_seconds) {
      Response resp;
      resp.kind = Response::Kind::kError;
      resp.name = it->first;
      resp.error = "Tensor '" + it->first + "' was never submitted by " + MissingRanks(e) +
                   " within " + std::to_string(static_cast<int>(config_.stall_shutdown_seconds)) +
                   " s (MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS); the ranks that submitted it give up.";
      ready.emplace_back(e.arrival, resp);
      it = Erase(it);
      continue;
    }
    ++it;
  }
  // A call whose ranks disagree fails as a whole: tensors of its group that
  // still wait (a rank submitted more of them than the others) fail with it
  // rather than stall.
  for (const auto& failed : failed_groups) FailGroup(failed.first, failed.second, &ready);
  TakeConflicts(now, &ready);
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) {
    if (a.second.priority != b.second.priority) return a.second.priority > b.second.priority;
    return a.first < b.first;
  });
  for (auto& r : ready) out->push_back(std::move(r.second));
}

void MessageTable::WarnStalls(Clock::time_point now) {
  if (config_.stall_check_seconds <= 0) return;
  for (auto& kv : entries_) {
    Entry& e = kv.second;
    if (std::chrono::duration<double>(now - e.last_warning).count() <= config_.stall_check_seconds) continue;
    e.last_warning = now;
    MXP_LOG(*logger_, kWarning,
            "Stall: tensor '" << kv.first << "' has waited "
                              << static_cast<int>(std::chrono::duration<double>(now - e.first_seen).count())
                              << " s for " << MissingRanks(e)
                              << ". Every rank must submit the same collectives; check for ranks that "
                                 "skipped a step or named tensors differently.");
  }
}

bool MessageTable::NeedsBroadcast(Clock::time_point now) const {
  if (!fences_.empty()) return true;  // Note [Fences]: rounds in full until the others' requests are seen
  if (!FindConflicts(now).empty()) return true;
  if (config_.stall_shutdown_seconds <= 0) return false;
  for (const auto& kv : entries_) {
    if (std::chrono::duration<double>(now - kv.second.first_seen).count() > config_.stall_shutdown_seconds)
      return true;
  }
  return false;
}

}  // namespace mxplugin
