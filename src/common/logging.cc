#include "common/logging.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace mxplugin {

LogLevel ParseLogLevel(const std::string& text, LogLevel fallback) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "trace") return LogLevel::kTrace;
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warning" || t == "warn") return LogLevel::kWarning;
  if (t == "error") return LogLevel::kError;
  return fallback;
}

void Logger::Log(LogLevel level, const std::string& message) const {
  static const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR"};
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(stderr, "[mxplugin rank %d] %s: %s\n", rank_, kNames[static_cast<int>(level)],
               message.c_str());
  std::fflush(stderr);
}

}  // namespace mxplugin
