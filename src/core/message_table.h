// Coordinator-side bookkeeping (rank 0 of each process set): which ranks have
// submitted which names, validation of complete names, and stall detection.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "core/request.h"

namespace mxplugin {

class MessageTable {
 public:
  MessageTable(int size, const Config& config, const Logger* logger, std::vector<int> global_ranks)
      : size_(size), config_(config), logger_(logger), world_ranks_(std::move(global_ranks)) {}

  void Add(const RequestMeta& meta, Clock::time_point now);
  // Moves complete names (validated) and stall-timed-out names into `out`,
  // highest priority first.
  void TakeReady(Clock::time_point now, std::vector<Response>* out);
  // Logs (on this rank) names incomplete for longer than the stall check
  // time, with the ranks they wait for. Cheap; called every round.
  void WarnStalls(Clock::time_point now);
  // True when some entry has exceeded the stall shutdown time, i.e. the
  // coordinator has an error to broadcast even if nobody sent anything new.
  bool NeedsBroadcast(Clock::time_point now) const;

 private:
  struct Entry {
    std::vector<RequestMeta> metas;  // indexed by rank; name empty = missing
    int count = 0;
    Clock::time_point first_seen;
    Clock::time_point last_warning;
    uint64_t arrival = 0;
  };
  Response Validate(const std::string& name, const Entry& entry) const;
  std::string MissingRanks(const Entry& entry) const;

  int size_;
  const Config& config_;
  const Logger* logger_;
  std::vector<int> world_ranks_;
  std::map<std::string, Entry> entries_;
  uint64_t next_arrival_ = 0;
};

}  // namespace mxplugin
