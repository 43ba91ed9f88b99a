#include "core/controller.h"

#include <algorithm>

namespace mxplugin {
namespace {

constexpr uint64_t kNoUncachedFlag = 1;   // set by a rank with nothing for the coordinator
constexpr uint64_t kNoShutdownFlag = 2;   // set by a rank that wants to keep going
constexpr uint64_t kNoFailureFlag = 4;    // set by a rank whose stop, if any, is not a failure
// Longest a cached request waits before it is sent in full (see RunRound).
constexpr double kCachedResendSeconds = 10.0;

}  // namespace

Controller::Controller(ControlPlane* comm, const Config& config, const Logger* logger, double wait_seconds)
    : comm_(comm), config_(config), wait_seconds_(wait_seconds), logger_(logger), cache_(config.cache_capacity) {
  if (comm_->rank() == 0) {
    table_ = std::make_unique<MessageTable>(comm_->size(), config_, logger_, comm_->global_ranks());
  }
}

void Controller::Submit(const RequestMeta& meta, Clock::time_point now) {
  int bit = ResponseCache::Cacheable(meta.op) ? cache_.Lookup(meta) : -1;
  if (bit >= 0) {
    cached_pending_[bit] = Pending{meta, now};
  } else {
    outbox_.push_back(meta);
  }
}

Status Controller::RunRound(bool want_shutdown, bool i_failed, std::vector<Response>* responses, bool* shutdown,
                            bool* failed) {
  const Clock::time_point now = Clock::now();
  const auto deadline = now + std::chrono::microseconds(static_cast<int64_t>(wait_seconds_ * 1e6));

  // A cached request waiting too long is sent in full, so the coordinator's
  // stall and conflict detection (which name the ranks) see it: a rank that
  // repeats a cached call while another calls something else under the same
  // name must get a mismatch within seconds, not after the stall warning.
  double resend_after = config_.stall_check_seconds > 0 ? config_.stall_check_seconds
                                                        : config_.stall_shutdown_seconds;
  if (resend_after <= 0 || resend_after > kCachedResendSeconds) resend_after = kCachedResendSeconds;
  if (resend_after > 0) {
    for (auto it = cached_pending_.begin(); it != cached_pending_.end();) {
      if (std::chrono::duration<double>(now - it->second.since).count() > resend_after) {
        outbox_.push_back(it->second.meta);
        it = cached_pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  if (table_) table_->WarnStalls(now);

  const int words = 1 + (cache_.num_bits() + 63) / 64;
  std::vector<uint64_t> bits(words, 0);
  bool coordinator_busy = table_ && table_->NeedsBroadcast(now);
  if (outbox_.empty() && !coordinator_busy) bits[0] |= kNoUncachedFlag;
  if (!want_shutdown) bits[0] |= kNoShutdownFlag;
  if (!i_failed) bits[0] |= kNoFailureFlag;
  for (const auto& kv : cached_pending_) bits[1 + kv.first / 64] |= uint64_t{1} << (kv.first % 64);

  Status st = comm_->AllreduceBitwiseAnd(&bits, deadline);
  if (!st.ok()) return st;
  *shutdown = (bits[0] & kNoShutdownFlag) == 0;
  *failed = (bits[0] & kNoFailureFlag) == 0;
  if (*shutdown) return Status::Ok();

  // Cached requests ready everywhere: same bits, same cache, same order on all ranks.
  std::vector<std::pair<int, int>> ready_bits;  // (priority, bit)
  for (int bit = 0; bit < cache_.num_bits(); ++bit) {
    if (bits[1 + bit / 64] & (uint64_t{1} << (bit % 64))) ready_bits.emplace_back(cache_.priority(bit), bit);
  }
  std::stable_sort(ready_bits.begin(), ready_bits.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& pb : ready_bits) {
    const RequestMeta& m = cache_.meta(pb.second);
    Response r;
    r.name = m.name;
    r.op = m.op;
    r.priority = pb.first;
    r.sizes = cache_.sizes(pb.second);
    responses->push_back(std::move(r));
    cached_pending_.erase(pb.second);
  }

  if (bits[0] & kNoUncachedFlag) return Status::Ok();

  std::vector<std::string> received;
  st = comm_->GatherBytes(SerializeMetas(outbox_), &received, deadline);
  if (!st.ok()) return st;
  for (auto& meta : outbox_) sent_[meta.name] = std::move(meta);
  outbox_.clear();

  std::string plan_bytes;
  if (table_) {
    RoundPlan plan;
    auto invalidate = [&plan](const std::string& name) {
      if (std::find(plan.invalidated.begin(), plan.invalidated.end(), name) == plan.invalidated.end()) {
        plan.invalidated.push_back(name);
      }
    };
    for (const auto& bytes : received) {
      for (const auto& meta : ParseMetas(bytes)) {
        // A full request for a cached name means signatures changed (or a
        // rank stalled): drop the entry everywhere and negotiate it in full.
        if (cache_.Contains(meta.name)) invalidate(meta.name);
        // So does one of another kind (another collective or group size, a
        // refusal) under the group of cached names: the ranks disagree on
        // the call, or call something else under its name now. Sent in
        // full, the cached names let the coordinator see what every rank
        // submitted, and find a conflict within the mismatch grace (a
        // refusal at once) rather than after the cached resend.
        for (const auto& name : cache_.NamesInGroup(meta.group)) {
          const RequestMeta& cached = cache_.Cached(name);
          if (cached.op != meta.op || cached.group_size != meta.group_size) invalidate(name);
        }
        table_->Add(meta, now);
      }
    }
    table_->TakeReady(now, &plan.responses);
    plan.full_rounds = table_->WantsFullRounds();
    plan_bytes = SerializePlan(plan);
  }
  st = comm_->BroadcastBytes(&plan_bytes, deadline);
  if (!st.ok()) return st;
  RoundPlan plan = ParsePlan(plan_bytes);

  if (plan.full_rounds) {  // Notes [Fences], [Joined ranks]: the coordinator must see them
    for (auto& kv : cached_pending_) outbox_.push_back(kv.second.meta);
    cached_pending_.clear();
  }
  for (const auto& name : plan.invalidated) {
    for (auto it = cached_pending_.begin(); it != cached_pending_.end();) {
      if (it->second.meta.name == name) {
        outbox_.push_back(it->second.meta);
        it = cached_pending_.erase(it);
      } else {
        ++it;
      }
    }
    cache_.Erase(name);
  }
  for (auto& resp : plan.responses) {
    auto sent = sent_.find(resp.name);
    if (sent != sent_.end()) {
      // Every member holds this name's request, validated equal to everyone
      // else's, so every rank inserts the same signature at the same bit.
      // Not one with stand-ins (Note [Joined ranks]): the joined ranks did
      // not send it, so they could not cache it alike.
      if (resp.kind == Response::Kind::kOk && ResponseCache::Cacheable(resp.op) && resp.joined.empty()) {
        cache_.Put(sent->second, resp.priority, resp.sizes);
      }
      sent_.erase(sent);
    }
    responses->push_back(std::move(resp));
  }
  return Status::Ok();
}

std::vector<std::string> Controller::TakeUnseen() {
  std::vector<std::string> names;
  for (const auto& kv : cached_pending_) names.push_back(kv.second.meta.name);
  cached_pending_.clear();
  for (const auto& meta : outbox_) names.push_back(meta.name);  // cache bits the plan moved (full rounds, invalidated)
  outbox_.clear();
  return names;
}

}  // namespace mxplugin
