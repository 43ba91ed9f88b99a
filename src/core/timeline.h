// Chrome-trace JSON (chrome://tracing, Perfetto) of what each tensor went
// through: NEGOTIATE, MEMCPY_IN_FUSION_BUFFER, the collective itself,
// MEMCPY_OUT_FUSION_BUFFER. One row ("thread") per tensor name.
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/communicator.h"

namespace mxplugin {

class Timeline {
 public:
  ~Timeline() { Stop(); }
  // Rank 0 writes `path`; with "{rank}" in it every rank writes its own file.
  // Returns false (and leaves the timeline off) when the file can't be opened.
  bool Start(const std::string& path, int rank, bool mark_cycles);
  void Stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_; }
  void Record(const std::string& tensor, const char* phase, Clock::time_point begin, Clock::time_point end);
  void MarkCycle(Clock::time_point at);

 private:
  int RowFor(const std::string& tensor);
  double Micros(Clock::time_point t) const;

  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::atomic<bool> active_{false};  // file_ != nullptr, readable without the lock
  bool mark_cycles_ = false;
  bool first_event_ = true;
  int rank_ = 0;
  Clock::time_point origin_;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace mxplugin
