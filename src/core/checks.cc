// Core's argument checks: what can be found wrong with an op on this rank
// before anything is queued (the rest is found by negotiation).
#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/core.h"
#include "core/ranks_text.h"

namespace mxplugin {
namespace {

// `gpu` runs GPU tensors (or says why nothing can).
Status CheckTensorOp(const TensorOp& op, int set_size, const GpuBackend& gpu) {
  const RequestMeta& m = op.meta;
  // Built only for a message: this runs for every tensor of every call.
  auto who = [&m] { return std::string(OpTypeName(m.op)) + " '" + m.name + "'"; };
  if (m.device != kCpuDevice) {
    if (!gpu.runtime) {
      return Status::InvalidArgument(who() + ": the tensor is on " + DeviceName(m.device) + ", but " + gpu.missing);
    }
    if (m.op == OpType::kBarrier || m.op == OpType::kRefusal || m.op == OpType::kJoin) {
      return Status::InvalidArgument(who() + ": a " + OpTypeName(m.op) + " carries no tensor");
    }
  }
  if (op.input.device != m.device || op.output.device != m.device) {
    return Status::InvalidArgument(who() + ": input is on " + DeviceName(op.input.device) + " and output on " +
                                   DeviceName(op.output.device) + "; both must be on " + DeviceName(m.device));
  }
  if (op.sized_output && ((m.op != OpType::kAllgather && m.op != OpType::kAlltoall) || m.device != kCpuDevice)) {
    return Status::InvalidArgument(who() + ": only an allgather or alltoall of host tensors can leave its output "
                                   "to the core");
  }
  if (m.op == OpType::kJoin && op.output.data != nullptr &&
      (op.output.dtype != DataType::kInt32 || op.output.num_elements() != 1)) {
    return Status::InvalidArgument(who() + ": its output, if any, is one int32 (the rank that joined last)");
  }
  if (m.op == OpType::kAllreduce && op.output.num_elements() != op.input.num_elements()) {
    return Status::InvalidArgument(who() + ": output and input sizes differ");
  }
  if (m.op == OpType::kAlltoall) {
    if (static_cast<int>(m.splits.size()) != set_size) {
      return Status::InvalidArgument(who() + ": splits must have one entry per rank of the process set (" +
                                     std::to_string(set_size) + "), got " + std::to_string(m.splits.size()));
    }
    int64_t total = 0;
    const int64_t rows = m.shape.empty() ? 1 : m.shape[0];
    if (rows < 0) return Status::InvalidArgument(who() + ": the first dimension is negative, " + std::to_string(rows));
    for (int64_t s : m.splits) {
      if (s < 0) return Status::InvalidArgument(who() + ": splits must be non-negative");
      // Each split at most what is left of the rows, so the sum cannot wrap around to them.
      if (s > rows - total) {
        return Status::InvalidArgument(who() + ": splits sum to more than the first dimension, " +
                                       std::to_string(rows));
      }
      total += s;
    }
    if (total != rows) {
      return Status::InvalidArgument(who() + ": splits sum to " + std::to_string(total) +
                                     " but the first dimension is " + std::to_string(rows));
    }
  }
  if ((m.op == OpType::kReducescatter || m.op == OpType::kAllgather || m.op == OpType::kAlltoall) &&
      m.shape.empty()) {
    return Status::InvalidArgument(who() + ": needs a tensor with at least one dimension");
  }
  if ((m.op == OpType::kReducescatter || m.op == OpType::kAllreduce) && m.reduce_op != ReduceOp::kSum &&
      m.reduce_op != ReduceOp::kAverage && m.op == OpType::kReducescatter) {
    return Status::InvalidArgument(who() + ": reducescatter supports Sum and Average only");
  }
  return Status::Ok();
}

}  // namespace

void Core::CheckGpuArguments(const std::vector<TensorOp>& ops) const {
  if (!gpu_.runtime) return;  // CheckTensorOp says why GPU tensors cannot run
  int devices = -1;  // asked once per call, at its first GPU op
  std::string reason;
  for (const TensorOp& op : ops) {
    const RequestMeta& m = op.meta;
    if (m.device == kCpuDevice) continue;
    const std::string who = std::string(OpTypeName(m.op)) + " '" + m.name + "'";
    if (devices < 0) devices = gpu_.runtime->DeviceCount(&reason);
    if (m.device < 0 || m.device >= devices) {
      throw Error(Status::InvalidArgument(who + ": the tensor is on " + DeviceName(m.device) +
                                          ", but this process sees " + std::to_string(devices) + " CUDA device(s)" +
                                          (reason.empty() ? std::string() : " (" + reason + ")")));
    }
    // Adapters that fill in the pointers later (MXNet) check before they are known.
    for (const auto& part : {std::make_pair(&op.input, "input"), std::make_pair(&op.output, "output")}) {
      const TensorRef& t = *part.first;
      if (t.num_elements() == 0 || t.data == nullptr) continue;
      const size_t esize = DataTypeSize(m.dtype);
      if (reinterpret_cast<uintptr_t>(t.data) % esize != 0) {
        std::ostringstream at;
        at << t.data;
        throw Error(Status::InvalidArgument(who + ": the " + part.second + " at " + at.str() + " is not aligned to " +
                                            DataTypeName(m.dtype) + "'s " + std::to_string(esize) +
                                            "-byte elements; GPU kernels and NCCL would fault on it"));
      }
      int owner = -1;
      ThrowIfError(gpu_.runtime->CheckPointer(t.data, who + ": " + part.second, &owner));
      if (owner >= 0 && owner != m.device) {
        throw Error(Status::InvalidArgument(who + ": the " + part.second + " lives on " + DeviceName(owner) +
                                            ", but the op says " + DeviceName(m.device)));
      }
    }
  }
}

void Core::Check(int process_set_id, const std::vector<TensorOp>& ops) const {
  CheckGpuArguments(ops);
  std::lock_guard<std::mutex> lock(mutex_);
  CheckLocked(process_set_id, ops);
}

const Core::ProcessSet& Core::CheckLocked(int process_set_id, const std::vector<TensorOp>& ops) const {
  if (Stopped()) throw Error(stop_status_);
  auto it = sets_.find(process_set_id);
  if (it == sets_.end()) {
    throw Error(UnknownSet(process_set_id));
  }
  const ProcessSet& set = *it->second;
  if (!set.group.data) {
    throw Error(Status::InvalidArgument("this process (rank " + std::to_string(topology_.rank) +
                                        ") is not a member of process set " + std::to_string(process_set_id) +
                                        " " + RanksText(set.ranks)));
  }
  std::unordered_set<std::string_view> names;  // views of the ops' own names
  names.reserve(ops.size());
  for (const auto& op : ops) {
    if (!names.insert(op.meta.name).second) {
      throw Error(Status::InvalidArgument("the name '" + op.meta.name + "' appears twice in one grouped call"));
    }
    ThrowIfError(CheckTensorOp(op, static_cast<int>(set.ranks.size()), gpu_));
    if (op.meta.op == OpType::kBroadcast &&
        std::find(set.ranks.begin(), set.ranks.end(), op.meta.root_rank) == set.ranks.end()) {
      throw Error(Status::InvalidArgument("broadcast '" + op.meta.name + "': root rank " +
                                          std::to_string(op.meta.root_rank) + " is not in process set " +
                                          RanksText(set.ranks)));
    }
  }
  // Note [GPU lanes] binds each rank's NCCL communicators to one device: the
  // first GPU op that passes every check chooses it.
  int device = gpu_device_;
  for (const auto& op : ops) {
    if (op.meta.device == kCpuDevice) continue;
    if (device == kCpuDevice) device = op.meta.device;
    if (op.meta.device != device) {
      throw Error(Status::InvalidArgument(std::string(OpTypeName(op.meta.op)) + " '" + op.meta.name +
                                          "': the tensor is on " + DeviceName(op.meta.device) + ", but rank " +
                                          std::to_string(topology_.rank) + " runs its GPU collectives on " +
                                          DeviceName(device) + "; use one GPU per process"));
    }
  }
  gpu_device_ = device;
  return set;
}

}  // namespace mxplugin
