#include "common/config.h"

#include <cstdlib>
#include <stdexcept>

#include "common/status.h"

namespace mxplugin {
namespace {

const char* Lookup(const char* name) {
  const char* v = std::getenv((std::string("MXPLUGIN_") + name).c_str());
  if (v == nullptr || *v == '\0') v = std::getenv((std::string("HOROVOD_") + name).c_str());
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

double ReadDouble(const char* name, double fallback) {
  const char* v = Lookup(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || d < 0) {
    throw Error(Status::InvalidArgument(std::string("MXPLUGIN_") + name + "='" + v +
                                        "' is not a non-negative number"));
  }
  return d;
}

}  // namespace

Config Config::FromEnvironment() {
  Config c;
  c.fusion_threshold_bytes =
      static_cast<int64_t>(ReadDouble("FUSION_THRESHOLD", static_cast<double>(c.fusion_threshold_bytes)));
  c.direct_threshold_bytes =
      static_cast<int64_t>(ReadDouble("DIRECT_THRESHOLD", static_cast<double>(c.direct_threshold_bytes)));
  c.gpu_direct_threshold_bytes = static_cast<int64_t>(
      ReadDouble("GPU_DIRECT_THRESHOLD", static_cast<double>(c.gpu_direct_threshold_bytes)));
  c.cycle_time_ms = ReadDouble("CYCLE_TIME", c.cycle_time_ms);
  c.stall_check_seconds = ReadDouble("STALL_CHECK_TIME_SECONDS", c.stall_check_seconds);
  c.stall_shutdown_seconds = ReadDouble("STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds);
  c.mismatch_grace_seconds = ReadDouble("MISMATCH_GRACE_SECONDS", c.mismatch_grace_seconds);
  c.peer_timeout_seconds = ReadDouble("PEER_TIMEOUT_SECONDS", c.peer_timeout_seconds);
  c.world_crash_exit_code = static_cast<int>(ReadDouble("WORLD_CRASH_EXIT_CODE", c.world_crash_exit_code));
  c.cache_capacity = static_cast<int>(ReadDouble("CACHE_CAPACITY", c.cache_capacity));
  c.num_streams = static_cast<int>(ReadDouble("NUM_STREAMS", c.num_streams));
  if (Lookup("NUM_STREAMS") == nullptr) c.num_streams = static_cast<int>(ReadDouble("NUM_NCCL_STREAMS", c.num_streams));
  if (const char* v = Lookup("TIMELINE")) c.timeline_path = v;
  if (const char* v = Lookup("TIMELINE_MARK_CYCLES")) c.timeline_mark_cycles = std::string(v) != "0";
  if (const char* v = Lookup("LOG_LEVEL")) c.log_level = ParseLogLevel(v, c.log_level);
  if (const char* v = Lookup("MPI_THREADS")) {
    std::string level = v;
    if (level != "multiple" && level != "funneled") {
      throw Error(Status::InvalidArgument("MXPLUGIN_MPI_THREADS='" + level + "': use funneled or multiple"));
    }
    c.mpi_thread_multiple = level == "multiple";
  }
  if (const char* v = Lookup("HIERARCHICAL_ALLREDUCE")) {
    std::string s = v;
    if (s != "0" && s != "1" && s != "auto") {
      throw Error(Status::InvalidArgument("MXPLUGIN_HIERARCHICAL_ALLREDUCE='" + s + "': use 0, 1 or auto"));
    }
    c.hierarchical_allreduce = s != "0";
  }
  if (c.num_streams < 1) c.num_streams = 1;
  return c;
}

}  // namespace mxplugin
