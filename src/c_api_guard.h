// The one conversion of the C boundary, shared by every c_api*.cc file: a
// Status, an Error or any other exception becomes a StatusCode return value
// with its message in mxp_last_error().
#pragma once

#include <exception>
#include <type_traits>

#include "c_api.h"
#include "common/status.h"

namespace mxplugin {
namespace capi {

// 0 for Ok; otherwise the code (kInternal for an error that has none).
inline int Report(const Status& s) {
  if (s.ok()) return 0;
  return mxp_set_last_error(static_cast<int>(s.code()), s.reason().c_str());
}

// Runs `f` (returning void or a Status) and reports what it returned or threw.
template <typename F>
int Guard(F&& f) {
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return 0;
    } else {
      return Report(f());
    }
  } catch (const Error& e) {
    return Report(e.status().ok() ? Status::Internal(e.what()) : e.status());
  } catch (const std::exception& e) {
    return Report(Status::Internal(e.what()));
  }
}

}  // namespace capi
}  // namespace mxplugin
