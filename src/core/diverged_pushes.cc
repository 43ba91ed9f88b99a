// What a rank that went on without a fence pushed before it knew: stamps
// on pushes, push batches, and failing what was pushed up to the failure
// (Note [Diverged pushes]).
#include "common/codes.h"
#include "core/core.h"

namespace mxplugin {

// Note [Diverged pushes]: when a fence fails because this rank went on
// without it (Note [Fences] in message_conflicts.cc), the coordinator fails
// what this rank had submitted by then. But this rank's step goes on: its
// framework has pushed more of the step's collectives, which the engine
// enqueues only once their inputs are computed (a CI run saw PowerSGD's P
// arrive a cycle after the fence had failed the step's bucket), and the
// ranks in the fence will never submit them: a stall until the stall
// shutdown. So each push takes a stamp, and once a fence this rank missed
// has failed, whatever it pushed up to then fails with the fence's error
// as it reaches the loop. The pushes of one batch (DistributedTrainer's
// step(), allreduce_grads() and update(), made on one thread) share one
// stamp, so that a push of the step made just after the failure fails too;
// pushes after that (when the error may have been seen) run as usual.
//
// What this rank had already submitted but the coordinator never saw fails
// then too: a cache bit (the round that failed the fence took the fence off
// the table, so that round is not a full one and the bit is never sent in
// full), or a request the round's plan moved to the outbox (a loaded run
// found PowerSGD's P of one rank waiting for rank 0 at the next fence: the
// other rank had sent its own P in full, which invalidated the cached name).
// Nothing else of this rank can be waiting: the ranks in the fence finished
// their work before it, and the conflict failed all this rank had sent.
//
// A fence's error also comes to a rank that has not reached it yet when it
// is the stall shutdown's; such a rank has nothing pushed that the others
// wait for (they finished their work before the fence), so what fails then
// is only what it pushed before it got there, which nobody will match.

namespace {

// The push batch open on this thread: pushes of other threads (another
// trainer's, a user's) keep stamps of their own.
struct PushBatch {
  const Core* core = nullptr;
  int depth = 0;
  uint64_t stamp = 0;
};
thread_local PushBatch open_batch;

}  // namespace

uint64_t Core::StampPush() {
  if (open_batch.core == this && open_batch.depth > 0) return open_batch.stamp;
  return ++pushes_;  // from 1: 0 is "not stamped"
}

void Core::BeginPushBatch() {
  if (open_batch.core != this || open_batch.depth == 0) {
    open_batch = PushBatch{this, 0, ++pushes_};  // a batch left open on a core since gone is dropped
  }
  ++open_batch.depth;
}

void Core::EndPushBatch() {
  if (open_batch.core == this && open_batch.depth > 0 && --open_batch.depth == 0) open_batch.core = nullptr;
}

void Core::NoteFencesMissed(ProcessSet& set, const std::vector<Response>& responses) {
  for (const Response& resp : responses) {
    if (resp.kind != Response::Kind::kError || resp.name.rfind(MXP_FENCE_PREFIX, 0) != 0) continue;
    if (set.pending.count(resp.name)) continue;  // this rank is in the fence: nothing of it went on
    set.diverged_through = pushes_.load();
    set.diverged_error = resp.error;
    for (const auto& name : set.controller->TakeUnseen()) {
      auto it = set.pending.find(name);
      if (it == set.pending.end()) continue;
      Finish(it->second, Status::Mismatch(resp.error));
      set.pending.erase(it);
    }
  }
}

}  // namespace mxplugin
