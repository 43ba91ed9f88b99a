// A POSIX shared-memory segment mapped by the ranks of one host: the first
// creates it (space reserved up front, so a full /dev/shm is an error here
// rather than a SIGBUS later), the others attach by name, and the creator
// unlinks the name once all have attached, so nothing outlives the ranks.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace mxplugin {
namespace shm {

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Status Create(const std::string& name, size_t bytes);
  Status Attach(const std::string& name, size_t bytes);
  // Removes the name (the mapping stays); the creator, once all attached.
  void Unlink();

  char* data() const { return static_cast<char*>(addr_); }
  size_t size() const { return bytes_; }

 private:
  Status Map(int fd, size_t bytes, const char* what);
  std::string name_;
  void* addr_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;
};

}  // namespace shm
}  // namespace mxplugin
