// Status carried through asynchronous completions, and the one exception type
// thrown by synchronous C++ code. The C API converts both into an error code
// plus message; Cython turns those into Python exceptions in one place.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace mxplugin {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // user error found locally (bad shape, unknown op, ...)
  kMismatch = 2,          // ranks disagreed during negotiation
  kAborted = 3,           // shut down, or a peer died / timed out
  kInternal = 4,          // MPI/CUDA failure or a bug
  kNotInitialized = 5,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string reason) : code_(code), reason_(std::move(reason)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string r) { return {StatusCode::kInvalidArgument, std::move(r)}; }
  static Status Mismatch(std::string r) { return {StatusCode::kMismatch, std::move(r)}; }
  static Status Aborted(std::string r) { return {StatusCode::kAborted, std::move(r)}; }
  static Status Internal(std::string r) { return {StatusCode::kInternal, std::move(r)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& reason() const { return reason_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string reason_;
};

// Thrown by synchronous C++ calls; caught only in c_api.cc.
class Error : public std::runtime_error {
 public:
  explicit Error(Status status) : std::runtime_error(status.reason()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw Error(s);
}

}  // namespace mxplugin
