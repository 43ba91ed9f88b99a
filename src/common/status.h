// Status carried through asynchronous completions, and the one exception type
// thrown by synchronous C++ code. The C API converts both into an error code
// plus message; Cython turns those into Python exceptions in one place.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "common/codes.h"

namespace mxplugin {

// The C API's codes (common/codes.h), as C++.
enum class StatusCode : int {
  kOk = MXP_STATUS_OK,
  kInvalidArgument = MXP_STATUS_INVALID_ARGUMENT,
  kMismatch = MXP_STATUS_MISMATCH,
  kAborted = MXP_STATUS_ABORTED,
  kInternal = MXP_STATUS_INTERNAL,
  kNotInitialized = MXP_STATUS_NOT_INITIALIZED,
  kWrongType = MXP_STATUS_WRONG_TYPE,
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
  static Status WrongType(std::string r) { return {StatusCode::kWrongType, std::move(r)}; }

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
