// Coordinator-side bookkeeping (rank 0 of each process set): which ranks have
// submitted which names, validation of complete names, and stall detection.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "core/request.h"

namespace mxplugin {

class MessageTable {
 public:
  MessageTable(int size, const Config& config, const Logger* logger, std::vector<int> global_ranks)
      : size_(size), config_(config), logger_(logger), world_ranks_(std::move(global_ranks)), joined_(size, 0) {}

  void Add(const RequestMeta& meta, Clock::time_point now);
  // Moves complete names (validated) and stall-timed-out names into `out`,
  // highest priority first.
  void TakeReady(Clock::time_point now, std::vector<Response>* out);
  // Logs (on this rank) names incomplete for longer than the stall check
  // time, with the ranks they wait for. Cheap; called every round.
  void WarnStalls(Clock::time_point now);
  // True when some entry has exceeded the stall shutdown time or its group
  // is in conflict, i.e. the coordinator has an error to broadcast even if
  // nobody sent anything new.
  bool NeedsBroadcast(Clock::time_point now) const;
  // The coordinator must see every request, cached ones too: a fence
  // waits (Note [Fences]) or a rank has joined (Note [Joined ranks]).
  bool WantsFullRounds() const { return !fences_.empty() || joined_count_ > 0; }

 private:
  struct Entry {
    std::vector<RequestMeta> metas;  // indexed by rank; name empty = missing
    int count = 0;
    Clock::time_point first_seen;
    Clock::time_point last_warning;
    uint64_t arrival = 0;
    std::string group;  // RequestMeta::group of the first request
    bool join = false;  // a join (Note [Joined ranks]): waits as long as the others train
  };
  using Entries = std::map<std::string, Entry>;
  Response Validate(const std::string& name, const Entry& entry) const;
  // Note [Joined ranks]: the response to an entry that every rank submitted
  // but the joined ones (`stand_ins`, by set rank), with what they stand in
  // for, or the error that says why they cannot.
  Response WithStandIns(const std::string& name, const Entry& entry, const std::vector<int>& stand_ins) const;
  std::string MissingRanks(const Entry& entry) const;
  // Fails every waiting entry of a group whose ranks submitted different
  // things under it (another collective, another number of tensors) for
  // longer than the mismatch grace, or where some rank refused the call
  // (Note [Refused calls]), once every rank has submitted something under it:
  // those ranks will never submit what the others wait for, so this is a
  // mismatch now, not a stall later.
  void TakeConflicts(Clock::time_point now, std::vector<std::pair<uint64_t, Response>>* ready);
  // Every waiting entry of `group` becomes an error response with `error`.
  void FailGroup(const std::string& group, const std::string& error,
                 std::vector<std::pair<uint64_t, Response>>* ready);
  // (group name, error message) of every group in conflict now.
  std::vector<std::pair<std::string, std::string>> FindConflicts(Clock::time_point now) const;
  // Adds to `found` the fences some rank went on without, with what it
  // submitted instead (Note [Fences]).
  void FindFenceConflicts(std::vector<std::pair<std::string, std::string>>* found) const;
  Entries::iterator Erase(Entries::iterator it);
  void ForgetEndedJoins();

  int size_;
  const Config& config_;
  const Logger* logger_;
  std::vector<int> world_ranks_;
  Entries entries_;
  std::map<std::string, std::set<std::string>> groups_;  // group name -> names of its waiting entries
  std::set<std::string> fences_;  // names of the waiting entries that are fences
  uint64_t next_arrival_ = 0;
  std::vector<char> joined_;  // by set rank: has joined and waits for the others (Note [Joined ranks])
  int joined_count_ = 0;
  int last_joined_ = -1;  // global rank
};

}  // namespace mxplugin
