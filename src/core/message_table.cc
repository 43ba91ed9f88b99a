#include "core/message_table.h"

#include <algorithm>
#include <sstream>

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
// order of first appearance), or "" when all values agree.
std::string ValuesByRank(const std::vector<std::string>& values, const std::vector<int>& global_ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> by_value;
  for (size_t r = 0; r < values.size(); ++r) {
    auto it = std::find_if(by_value.begin(), by_value.end(), [&](const auto& g) { return g.first == values[r]; });
    if (it == by_value.end()) {
      by_value.push_back({values[r], {global_ranks[r]}});
    } else {
      it->second.push_back(global_ranks[r]);
    }
  }
  if (by_value.size() <= 1) return "";
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
  } else {  // barriers compare their (empty) shape; control requests carry their arguments in it
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
  auto g = groups_.find(it->second.group);
  if (g != groups_.end()) {
    g->second.erase(it->first);
    if (g->second.empty()) groups_.erase(g);
  }
  return entries_.erase(it);
}

std::vector<std::pair<std::string, std::string>> MessageTable::FindConflicts(Clock::time_point now) const {
  std::vector<std::pair<std::string, std::string>> found;
  for (const auto& kv : groups_) {
    // Only a group with an entry waiting past the grace can be in conflict
    // (this runs every round, so the cheap test comes first).
    bool aged = false;
    for (const auto& name : kv.second) {
      aged = aged || std::chrono::duration<double>(now - entries_.at(name).first_seen).count() >
                         config_.mismatch_grace_seconds;
    }
    if (!aged) continue;
    // What each rank submitted under this group name, and whether an aged
    // entry waits for a rank that submitted something else instead.
    std::vector<std::set<std::string>> submitted(size_);
    for (const auto& name : kv.second) {
      const Entry& e = entries_.at(name);
      for (int r = 0; r < size_; ++r) {
        if (!e.metas[r].name.empty()) submitted[r].insert(Submission(e.metas[r]));
      }
    }
    bool conflict = false;
    for (const auto& name : kv.second) {
      const Entry& e = entries_.at(name);
      if (std::chrono::duration<double>(now - e.first_seen).count() <= config_.mismatch_grace_seconds) continue;
      std::string mine;
      for (const auto& m : e.metas) {
        if (!m.name.empty()) mine = Submission(m);
      }
      for (int r = 0; r < size_ && !conflict; ++r) {
        conflict = e.metas[r].name.empty() && !submitted[r].empty() && submitted[r].count(mine) == 0;
      }
      if (conflict) break;
    }
    if (!conflict) continue;
    std::vector<std::string> per_rank;
    for (const auto& mine : submitted) {
      std::string v;
      for (const auto& s : mine) v += (v.empty() ? "" : " and ") + s;
      per_rank.push_back(v.empty() ? "nothing yet" : v);
    }
    found.emplace_back(kv.first, "Mismatched collectives under the name '" + kv.first + "': " +
                                     ValuesByRank(per_rank, world_ranks_) +
                                     ". Every rank must submit the same collective, with the same number of "
                                     "tensors, under one name.");
  }
  return found;
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
  if (!FindConflicts(now).empty()) return true;
  if (config_.stall_shutdown_seconds <= 0) return false;
  for (const auto& kv : entries_) {
    if (std::chrono::duration<double>(now - kv.second.first_seen).count() > config_.stall_shutdown_seconds)
      return true;
  }
  return false;
}

}  // namespace mxplugin
