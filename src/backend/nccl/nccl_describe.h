// How the NCCL backend's files word an NCCL result in an error.
#pragma once

#include <nccl.h>

#include <string>

namespace mxplugin {

// The result's name plus NCCL's last message for `comm` (null: none); call
// it while the communicator is alive and not used by another thread.
inline std::string DescribeNccl(ncclResult_t r, ncclComm_t comm) {
  std::string out = ncclGetErrorString(r);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') out += " (" + std::string(last) + ")";
  return out;
}

}  // namespace mxplugin
