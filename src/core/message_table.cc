#include "core/message_table.h"

#include <algorithm>
#include <sstream>

#include "common/codes.h"
#include "core/message_text.h"

namespace mxplugin {

using namespace message_text;  // NOLINT: this file speaks in its words

// Note [Joined ranks]: a rank that has run out of data calls join() (a
// kJoin request). From the round the coordinator sees it until every rank
// of the set has joined, an entry that every other rank submitted is
// complete: the joined ranks take part with stand-ins the executor makes
// from the response's description of the request (Response::meta), as
// Horovod's join does: zeros in an allreduce or reducescatter (the sum is
// the others'; Average still divides by the set's size), no rows in an
// allgather (zeros of the others' shape in one that asks for them, as the
// exchanges of sizes before an allgather do: a row per rank, a joined
// rank's all zeros), a scratch buffer in a broadcast, a barrier's wait. What a
// stand-in cannot do fails at once on every rank that called it, naming
// the joined ranks: an alltoall (a joined rank has nothing to send or
// room to receive), a broadcast whose root has joined, GPU tensors,
// process set changes (control requests run code on every rank). A fence
// is not stood in for: Note [Fences] fails it, naming the join instead.
// The join itself completes when every rank has submitted it, telling all
// the global rank that joined last. Cached calls are never ready while a
// rank has joined (it sets no cache bits), so rounds are full ones
// (WantsFullRounds) and responses with stand-ins are not cached: the joined
// rank would not cache them alike. A join waits as long as the others
// train, so it is exempt from the stall warning and shutdown.
void MessageTable::Add(const RequestMeta& meta, Clock::time_point now) {
  if (meta.op == OpType::kJoin && meta.rank >= 0 && meta.rank < size_ && !joined_[meta.rank]) {
    joined_[meta.rank] = 1;
    ++joined_count_;
    last_joined_ = world_ranks_[meta.rank];
  }
  auto it = entries_.find(meta.name);
  if (it == entries_.end()) {
    Entry e;
    e.metas.resize(size_);
    e.first_seen = now;
    e.last_warning = now;
    e.arrival = next_arrival_++;
    e.group = meta.group.empty() ? meta.name : meta.group;
    e.join = meta.op == OpType::kJoin;
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
  if (metas[0].op == OpType::kAllgather) {
    // One description of what must agree, in the words of the exchange of
    // sizes (mxplugin/exchange.py), which small allgathers skip (Note
    // [Outputs the core sizes] in sized_output.cc).
    d = Disagreement(metas, world_ranks_,
                     [](const RequestMeta& m) { return std::string(DataTypeName(m.dtype)) + ", " + Trailing(m.shape); });
    if (!d.empty()) {
      resp.kind = Response::Kind::kError;
      resp.error = "Mismatched allgather for tensor '" + name + "': " + d +
                   ". Every rank must gather tensors of one dtype whose dimensions after the first agree.";
      return resp;
    }
  }
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

Response MessageTable::WithStandIns(const std::string& name, const Entry& entry,
                                    const std::vector<int>& stand_ins) const {
  const RequestMeta* first = nullptr;
  for (const auto& m : entry.metas) {
    if (first == nullptr && !m.name.empty()) first = &m;
  }
  // Validated as if the joined ranks had submitted what the first rank did:
  // a disagreement names only the ranks that submitted.
  Entry filled = entry;
  for (int r : stand_ins) {
    filled.metas[r] = *first;
    filled.metas[r].rank = r;
  }
  Response resp = Validate(name, filled);
  if (resp.kind == Response::Kind::kError) return resp;
  std::vector<int> joined_ranks;
  for (int r : stand_ins) joined_ranks.push_back(world_ranks_[r]);
  auto refuse = [&](const std::string& why) {
    resp.kind = Response::Kind::kError;
    resp.sizes.clear();
    resp.error = std::string(OpTypeName(first->op)) + " '" + name + "' cannot run while " + RankList(joined_ranks) +
                 (joined_ranks.size() == 1 ? " has" : " have") + " joined (join(): out of data, waiting for the "
                 "others): " + why + ".";
    return resp;
  };
  if (name.rfind(MXP_CONTROL_PREFIX, 0) == 0) {
    return refuse("process sets cannot be added or removed until every rank has joined");
  }
  if (first->device != kCpuDevice) return refuse("joined ranks take part in collectives of CPU tensors only");
  if (first->op == OpType::kAlltoall) {
    return refuse("a joined rank has no rows to send and no room to receive, and alltoall needs both");
  }
  if (first->op == OpType::kBroadcast && joined_[first->set_root]) return refuse("its root rank has joined");
  if (first->op == OpType::kAllgather && !first->zeros_when_joined) {
    for (int r : stand_ins) resp.sizes[r] = 0;  // a joined rank contributes no rows
  }
  resp.joined.assign(stand_ins.begin(), stand_ins.end());
  resp.meta = *first;
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

void MessageTable::TakeReady(Clock::time_point now, std::vector<Response>* out) {
  std::vector<std::pair<uint64_t, Response>> ready;
  std::vector<std::pair<std::string, std::string>> failed_groups;  // (group, error)
  std::vector<int> stand_ins;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    double age = std::chrono::duration<double>(now - e.first_seen).count();
    stand_ins.clear();
    if (e.count < size_ && joined_count_ > 0 && fences_.count(it->first) == 0) {
      for (int r = 0; r < size_; ++r) {
        if (e.metas[r].name.empty() && joined_[r]) stand_ins.push_back(r);
      }
    }
    if (e.count + static_cast<int>(stand_ins.size()) == size_) {
      Response resp = stand_ins.empty() ? Validate(it->first, e) : WithStandIns(it->first, e, stand_ins);
      if (e.join && resp.kind == Response::Kind::kOk) resp.sizes = {last_joined_};
      if (resp.kind == Response::Kind::kError) failed_groups.emplace_back(e.group, resp.error);
      ready.emplace_back(e.arrival, std::move(resp));
      it = Erase(it);
      continue;
    }
    if (config_.stall_shutdown_seconds > 0 && age > config_.stall_shutdown_seconds && !e.join) {
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
  if (joined_count_ > 0) ForgetEndedJoins();
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) {
    if (a.second.priority != b.second.priority) return a.second.priority > b.second.priority;
    return a.first < b.first;
  });
  for (auto& r : ready) out->push_back(std::move(r.second));
}

// After the round's entries (joined_ holds until every entry of the round
// has seen it): a rank whose join completed or failed (a fence it went on
// without, Note [Fences]) is no longer joined; its later calls are its own.
void MessageTable::ForgetEndedJoins() {
  std::vector<char> waiting(size_, 0);
  for (const auto& kv : entries_) {
    if (!kv.second.join) continue;
    for (int r = 0; r < size_; ++r) waiting[r] = waiting[r] || !kv.second.metas[r].name.empty();
  }
  for (int r = 0; r < size_; ++r) {
    if (joined_[r] && !waiting[r]) {
      joined_[r] = 0;
      --joined_count_;
    }
  }
  if (joined_count_ == 0) last_joined_ = -1;
}

void MessageTable::WarnStalls(Clock::time_point now) {
  if (config_.stall_check_seconds <= 0) return;
  for (auto& kv : entries_) {
    Entry& e = kv.second;
    if (e.join) continue;  // Note [Joined ranks]: waits as long as the others train
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
  if (WantsFullRounds()) return true;  // Notes [Fences], [Joined ranks]: the others' requests must be seen
  if (!FindConflicts(now).empty()) return true;
  if (config_.stall_shutdown_seconds <= 0) return false;
  for (const auto& kv : entries_) {
    if (!kv.second.join &&
        std::chrono::duration<double>(now - kv.second.first_seen).count() > config_.stall_shutdown_seconds)
      return true;
  }
  return false;
}

}  // namespace mxplugin
