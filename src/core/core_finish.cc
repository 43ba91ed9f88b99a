// How a request ends: Core::Finish (its name released, the next op of
// the name queued, its completion told) and Core::FailEverything; failed
// host outputs read as NaN.
#include <algorithm>
#include <limits>

#include "core/core.h"

namespace mxplugin {

namespace {

// Note [Failed outputs read as NaN]: MXNet raises a failed engine op's error
// once, at the first read of any of its outputs, and a grouped call is one
// engine op; the other outputs of a failed call would then read as whatever
// their fresh memory held. So a failed request's host output of a floating
// type, when it is not its input (in place, the caller's data stays as it
// was), is filled with NaN: never plausible numbers. Integers have no NaN
// and keep their contents; GPU outputs are left to the device. (A second
// engine op per output, failing with the error, was tried so that every
// output would raise at its first read: an op that starts on a variable
// holding an error adopts that shared error, so one read still cleared it
// for all, or not, depending on timing.)
void FillFailedOutput(const Request& req) {
  const TensorRef& out = req.output;
  if (out.data == nullptr || out.data == req.input.data || out.device != kCpuDevice || req.control) return;
  const int64_t n = out.num_elements();
  switch (out.dtype) {
    case DataType::kFloat32: std::fill_n(static_cast<float*>(out.data), n, std::numeric_limits<float>::quiet_NaN()); break;
    case DataType::kFloat64:
      std::fill_n(static_cast<double*>(out.data), n, std::numeric_limits<double>::quiet_NaN());
      break;
    case DataType::kFloat16: std::fill_n(static_cast<uint16_t*>(out.data), n, uint16_t{0x7E00}); break;
    case DataType::kBFloat16: std::fill_n(static_cast<uint16_t*>(out.data), n, uint16_t{0x7FC0}); break;
    default: break;
  }
}

}  // namespace

void Core::Finish(Request& req, const Status& status) {
  if (req.stand_in) return;  // Note [Joined ranks]: no name in flight here, nobody waiting
  if (!status.ok()) {
    FillFailedOutput(req);
    NoteFailure(status.code());
  }
  bool requeued = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Usually nothing waits: no key (a copy of the name) to build then.
    auto waiting = deferred_.empty() ? deferred_.end()
                                     : deferred_.find(std::make_pair(req.process_set_id, req.meta.name));
    if (waiting != deferred_.end()) {
      // The next op of this name starts negotiating now; the name stays in flight.
      queue_.push_back(std::move(waiting->second.front()));
      waiting->second.pop_front();
      if (waiting->second.empty()) deferred_.erase(waiting);
      requeued = true;
    } else {
      in_flight_[req.process_set_id].erase(req.meta.name);
    }
  }
  if (requeued) WakeLoops();
  // Release the name first: the callback may enqueue the same name again.
  if (req.completion) req.completion->Finish(status);
}

void Core::FailEverything(const Status& status) {
  std::vector<Request> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queued.swap(queue_);
    for (auto& kv : deferred_) {
      for (auto& r : kv.second) queued.push_back(std::move(r));
    }
    deferred_.clear();
  }
  for (auto& req : queued) Finish(req, status);
  for (auto& kv : sets_) {
    for (auto& pr : kv.second->pending) Finish(pr.second, status);
    kv.second->pending.clear();
  }
}

}  // namespace mxplugin
