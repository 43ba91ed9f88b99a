// Where the threads of an in-memory group meet: each member's i-th call
// meets the other members' i-th calls, as the calls of one MPI communicator
// match by order. Test infrastructure for the in-memory world
// (memory_world.h); nothing here is on the path of a real run.
//
// Note [Meeting in memory]: a call posts a pointer to its contribution,
// waits until every member has posted, lets the caller read all of them,
// and returns only when every member has finished reading, so a
// contribution (often the caller's own buffer, possibly its output) stays
// valid and unchanged while peers read it. Results are therefore built in a
// private buffer and copied out after the meeting.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace mxplugin {
namespace memory {

using Clock = std::chrono::steady_clock;

// Which ranks of a job have been stopped (killed); any thread.
class Liveness {
 public:
  explicit Liveness(int size);
  void Kill(int rank) { dead_[rank].store(true); }
  bool alive(int rank) const { return !dead_[rank].load(); }

 private:
  std::unique_ptr<std::atomic<bool>[]> dead_;
};

class Rendezvous {
 public:
  // `members`: the members' global ranks, in member order.
  Rendezvous(std::vector<int> members, std::shared_ptr<const Liveness> liveness);

  // Member `me`'s next call: posts `mine`, waits for every member's post,
  // runs `read` on all of them (in member order) and waits until every
  // member has read. Fails at once when `me` was killed; fails when the
  // deadline passes before everyone posted (a control-plane call, whose
  // peers may be silent), or, with `fail_if_peer_dead`, when a member has
  // been killed (a data-plane call, which has no deadline). A failed meeting
  // fails for every member that reaches it.
  Status Meet(int me, const void* mine, const std::function<void(const std::vector<const void*>&)>& read,
              Clock::time_point deadline, bool fail_if_peer_dead, const char* what);

 private:
  struct Slot {
    std::vector<const void*> posted;
    int arrived = 0;
    int finished_reading = 0;
    int left = 0;
    std::string failure;  // set once the meeting cannot happen
  };
  // The first killed member, or -1.
  int FirstDead() const;

  const std::vector<int> members_;
  const std::shared_ptr<const Liveness> liveness_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<uint64_t> next_call_;  // per member
  std::map<uint64_t, Slot> slots_;    // by call number; references stay valid until erased
};

}  // namespace memory
}  // namespace mxplugin
