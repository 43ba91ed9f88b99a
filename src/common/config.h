// Every tunable of the core, read from the environment in one place
// (MXPLUGIN_* first, HOROVOD_* as aliases).
#pragma once

#include <cstdint>
#include <string>

#include "common/logging.h"

namespace mxplugin {

struct Config {
  int64_t fusion_threshold_bytes = 64 << 20;  // MXPLUGIN_FUSION_THRESHOLD
  // Allreduce tensors at least this large skip the fusion buffer and are
  // reduced where they lie (no copy). MXPLUGIN_DIRECT_THRESHOLD
  int64_t direct_threshold_bytes = 256 << 10;
  // The same for GPU tensors. A device copy costs far less than another NCCL
  // call (one call of 102 MB took 1.84x longer as 43 calls on an H100), so by
  // default every GPU allreduce that fits the fusion buffer is fused.
  // -1: the fusion threshold. MXPLUGIN_GPU_DIRECT_THRESHOLD
  int64_t gpu_direct_threshold_bytes = -1;
  double cycle_time_ms = 1.0;                  // MXPLUGIN_CYCLE_TIME
  double stall_check_seconds = 60.0;           // MXPLUGIN_STALL_CHECK_TIME_SECONDS (0: off)
  double stall_shutdown_seconds = 600.0;       // MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS (0: off)
  // How long ranks may disagree on what they submitted under one group name
  // (another collective, another number of tensors) before the coordinator
  // calls it a mismatch: long enough for ranks that submit the same calls in
  // a different order to catch up. MXPLUGIN_MISMATCH_GRACE_SECONDS
  double mismatch_grace_seconds = 2.0;
  // How long a negotiation round may wait for peers before the core declares
  // them dead. MXPLUGIN_PEER_TIMEOUT_SECONDS
  double peer_timeout_seconds = 120.0;
  int cache_capacity = 4096;                   // MXPLUGIN_CACHE_CAPACITY (0: no cache)
  int num_streams = 2;                         // MXPLUGIN_NUM_STREAMS (GPU builds)
  std::string timeline_path;                   // MXPLUGIN_TIMELINE
  bool timeline_mark_cycles = false;           // MXPLUGIN_TIMELINE_MARK_CYCLES
  LogLevel log_level = LogLevel::kWarning;     // MXPLUGIN_LOG_LEVEL
  bool mpi_thread_multiple = true;             // MXPLUGIN_MPI_THREADS: multiple (default) or funneled
  // Allreduce within a host through shared memory and across hosts among the
  // ranks with the same local rank, when every host runs the same number (>1)
  // of a group's ranks. MXPLUGIN_HIERARCHICAL_ALLREDUCE=0 turns it off.
  bool hierarchical_allreduce = true;
  // Non-zero: a crash on the core's thread while the world runs ends the
  // process with this code (Note [Crashes under a running world], common/crash_exit.h); the
  // elastic launcher sets it. MXPLUGIN_WORLD_CRASH_EXIT_CODE
  int world_crash_exit_code = 0;

  static Config FromEnvironment();
};

}  // namespace mxplugin
