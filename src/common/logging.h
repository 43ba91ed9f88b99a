// Leveled logging to stderr, prefixed with the rank. The level comes from
// MXPLUGIN_LOG_LEVEL (trace, debug, info, warning, error); default warning.
#pragma once

#include <mutex>
#include <sstream>
#include <string>

namespace mxplugin {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

LogLevel ParseLogLevel(const std::string& text, LogLevel fallback);

class Logger {
 public:
  explicit Logger(LogLevel level = LogLevel::kWarning) : level_(level) {}
  void set_rank(int rank) { rank_ = rank; }
  bool enabled(LogLevel level) const { return level >= level_; }
  void Log(LogLevel level, const std::string& message) const;

 private:
  LogLevel level_;
  int rank_ = -1;
  mutable std::mutex mutex_;
};

}  // namespace mxplugin

// Builds the message only when the level is enabled.
#define MXP_LOG(logger, level, expr)                          \
  do {                                                        \
    if ((logger).enabled(::mxplugin::LogLevel::level)) {      \
      std::ostringstream mxp_log_stream_;                     \
      mxp_log_stream_ << expr;                                \
      (logger).Log(::mxplugin::LogLevel::level, mxp_log_stream_.str()); \
    }                                                         \
  } while (0)
