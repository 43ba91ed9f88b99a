// What a rank asks for (Request), what it tells the coordinator about it
// (RequestMeta), and what the coordinator decides (Response).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/types.h"

namespace mxplugin {

struct RequestMeta {
  std::string name;
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  int32_t device = kCpuDevice;
  std::vector<int64_t> shape;
  int32_t root_rank = 0;  // broadcast root, a global rank as the caller gave it
  int32_t set_root = 0;   // the same root's rank within the process set (Core::Enqueue)
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  int32_t priority = 0;
  int32_t rank = 0;  // sender, within the process set
  // The reduce op the caller asked for: Core::Enqueue turns Average into a
  // Sum with a 1/size factor, and mismatch messages must name the ops.
  ReduceOp requested_op = ReduceOp::kSum;
  // The name the call is negotiated under (the user's name; by default the
  // op's own) and how many ops its enqueue call held: ranks that disagree
  // on either under one group name are a mismatch, not a stall
  // (MessageTable::TakeConflicts).
  std::string group;
  int32_t group_size = 1;
  // allgather: a joined rank stands in with zeros of this shape rather than
  // no rows (mxp_op::zeros_when_joined; Note [Joined ranks]).
  bool zeros_when_joined = false;

  // Everything that must agree across ranks for a cached response to be reused.
  bool SameSignature(const RequestMeta& other) const;
};

// Completes a group of requests (one Enqueue call) once all are done, with the
// first error seen. Thread-safe; called from the background thread.
class Completion {
 public:
  Completion(size_t count, std::function<void(const Status&)> done)
      : remaining_(count), done_(std::move(done)) {}
  void Finish(const Status& status);

 private:
  std::atomic<size_t> remaining_;
  std::function<void(const Status&)> done_;
  std::atomic<bool> failed_{false};
  Status first_error_;
};

// Note [Outputs the core sizes] (core/sized_output.cc): an allgather or alltoall
// output the executor sizes once the rows are known.
struct SizedOutput {
  // Where the output goes: place(rows, bytes) when set (memory its owner
  // keeps valid; an exception from it fails the op), else `bytes`.
  std::function<void*(int64_t rows, size_t bytes)> place;
  std::vector<char> bytes;
  int64_t rows = 0;
  std::vector<int64_t> from_each;  // the rows each rank of the set sent this one
  int64_t exchanged_rows = 0;      // the rows of the whole exchange: the same on every rank
};

struct Request {
  RequestMeta meta;
  int process_set_id = 0;
  TensorRef input;
  TensorRef output;
  Clock::time_point enqueue_time;
  uint64_t pushed_at = 0;  // Core::StampPush() of its push; 0 for control requests (Note [Diverged pushes] in diverged_pushes.cc)
  std::shared_ptr<Completion> completion;
  // GPU tensors: an event marking the producer's work on input.stream,
  // recorded when the op was enqueued (DeviceRuntime::RecordReadyEvent).
  std::shared_ptr<void> ready_event;
  // Set for internal control requests (process set add/remove): run on the
  // background thread, on every rank, in the same position of the op order.
  std::function<Status()> control;
  // A joined rank's stand-in for a request it never made (Note [Joined
  // ranks]): the executor owns its buffers; nobody waits for it.
  bool stand_in = false;
  // Note [Outputs the core sizes]: an allgather whose output the caller
  // left to the core; the executor sizes it here when the rows are known.
  std::shared_ptr<SizedOutput> sized_output;
};

// Note [Control requests]: calls every rank makes together that change the
// core itself (process sets) or run on its thread (the benchmark
// reference), negotiated on the global set as barriers named
// "mxplugin.control.<n>" (n counts them, alike on every rank) whose shape
// carries the call: its kind, then its arguments. Ranks that make different
// such calls get a mismatch naming them, with their arguments.
enum class ControlKind : int64_t { kAddProcessSet = 1, kRemoveProcessSet = 2, kReferenceAllreduce = 3 };

// The call a control request's shape carries: "add_process_set(ranks [0, 2])";
// "" for a shape that carries none (a user's barrier).
std::string ControlText(const std::vector<int64_t>& shape);

struct Response {
  enum class Kind : int32_t { kOk = 0, kError = 1 };
  Kind kind = Kind::kOk;
  std::string name;
  OpType op = OpType::kAllreduce;
  std::string error;
  // allgather: first dimension of every rank; alltoall: every rank's splits, row-major.
  std::vector<int64_t> sizes;
  int32_t priority = 0;
  // Note [Joined ranks]: the ranks of the set (set ranks) that had joined
  // and take part with stand-ins, and the request they stand in for (one
  // submitter's description); both empty when every rank submitted.
  std::vector<int64_t> joined;
  RequestMeta meta;
};

// What the coordinator broadcasts after a round that needed it.
struct RoundPlan {
  std::vector<Response> responses;
  std::vector<std::string> invalidated;  // names to drop from the response cache
  // A fence waits (Note [Fences] in message_conflicts.cc) or a rank has
  // joined (Note [Joined ranks] in message_table.cc): the coordinator must
  // see every request, so cached ones are sent in full.
  bool full_rounds = false;
};

std::string SerializeMetas(const std::vector<RequestMeta>& metas);
std::vector<RequestMeta> ParseMetas(const std::string& bytes);
std::string SerializePlan(const RoundPlan& plan);
RoundPlan ParsePlan(const std::string& bytes);

}  // namespace mxplugin
