// Negotiation for one process set: decides, identically on every member, which
// requests run in this round and in which order.
//
// A round is: (1) one bitwise-AND allreduce carrying the response-cache bits
// of ready cached requests plus two flags (someone has uncached requests,
// someone wants to shut down); (2) only if the first flag is set, a gather of
// uncached request metadata to rank 0, which validates complete names and
// broadcasts a RoundPlan. All control messages are bounded by the peer
// timeout, so a dead rank surfaces as an error.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/control_plane.h"
#include "common/config.h"
#include "common/logging.h"
#include "core/message_table.h"
#include "core/response_cache.h"

namespace mxplugin {

class Controller {
 public:
  // `wait_seconds`: how long a round waits for its peers (the peer timeout,
  // less the time to name who is unreachable: Note [A verdict within the
  // timeout] in core/transfer_watchdog.cc).
  Controller(ControlPlane* comm, const Config& config, const Logger* logger, double wait_seconds);

  // Metadata of a request this rank just enqueued.
  void Submit(const RequestMeta& meta, Clock::time_point now);
  // One round; collective over the process set. On return `responses` holds
  // what to run, in order; `shutdown` tells that some rank asked to stop,
  // and `failed` that some rank asked because of a failure (`i_failed`).
  Status RunRound(bool want_shutdown, bool i_failed, std::vector<Response>* responses, bool* shutdown,
                  bool* failed);
  // Right after RunRound: the names of this rank's requests the coordinator
  // has not seen (cache bits, and those the round's plan moved to the
  // outbox to be sent in full), which leave the rounds (Note [Diverged
  // pushes] in diverged_pushes.cc: no conflict could fail them). At any
  // other time the outbox may hold requests that were never sent.
  std::vector<std::string> TakeUnseen();

 private:
  struct Pending {
    RequestMeta meta;
    Clock::time_point since;
  };

  ControlPlane* comm_;
  const Config& config_;
  const double wait_seconds_;
  const Logger* logger_;
  ResponseCache cache_;
  std::unique_ptr<MessageTable> table_;  // rank 0 only
  std::vector<RequestMeta> outbox_;      // uncached, not yet sent to the coordinator
  std::map<int, Pending> cached_pending_;  // by cache bit
  std::map<std::string, RequestMeta> sent_;  // sent to the coordinator, awaiting a response
};

}  // namespace mxplugin
