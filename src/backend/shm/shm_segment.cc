#include "backend/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mxplugin {
namespace shm {
namespace {

Status Failed(const std::string& what, const std::string& name, int err) {
  return Status::Internal(what + " of shared memory '" + name + "' failed: " + std::strerror(err));
}

}  // namespace

Segment::~Segment() {
  if (addr_ != nullptr) munmap(addr_, bytes_);
  Unlink();
}

Status Segment::Create(const std::string& name, size_t bytes) {
  name_ = name;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Failed("shm_open", name, errno);
  linked_ = true;
  // posix_fallocate, unlike ftruncate, fails now when tmpfs is too small.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    return Failed("reserving " + std::to_string(bytes >> 20) + " MiB", name, err);
  }
  return Map(fd, bytes, "mmap");
}

Status Segment::Attach(const std::string& name, size_t bytes) {
  name_ = name;
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return Failed("shm_open", name, errno);
  return Map(fd, bytes, "mmap");
}

Status Segment::Map(int fd, size_t bytes, const char* what) {
  void* addr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (addr == MAP_FAILED) return Failed(what, name_, err);
  addr_ = addr;
  bytes_ = bytes;
  return Status::Ok();
}

void Segment::Unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace shm
}  // namespace mxplugin
