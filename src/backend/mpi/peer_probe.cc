#include "backend/mpi/peer_probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

namespace mxplugin {
namespace {

void CopyName(char* out, size_t size, const std::string& name) {
  std::memset(out, 0, size);
  std::memcpy(out, name.data(), std::min(name.size(), size - 1));
}


}  // namespace

PeerProbe::PeerProbe() {
  const char* placed = std::getenv("PMI_HOSTNAME");
  std::string host = placed != nullptr ? placed : "";
  if (host.empty()) {
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS) host.assign(name, len);
  }
  CopyName(mine_.host, sizeof(mine_.host), host);
  mine_.pid = static_cast<int32_t>(getpid());

  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(any);
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len) != 0) {
    close(fd);
    return;
  }
  listener_ = fd;
  mine_.port = any.sin_port;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return;
  for (ifaddrs* a = list; a != nullptr && mine_.num_addresses < kMaxAddresses; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
    mine_.addresses[mine_.num_addresses++] = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
  }
  freeifaddrs(list);
}

PeerProbe::~PeerProbe() {
  if (listener_ >= 0) close(listener_);
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

void PeerProbe::Exchange(MPI_Comm comm, int rank) {
  int size = 0;
  if (MPI_Comm_size(comm, &size) != MPI_SUCCESS) return;
  std::vector<Endpoint> all(size);
  if (MPI_Allgather(&mine_, sizeof(Endpoint), MPI_BYTE, all.data(), sizeof(Endpoint), MPI_BYTE, comm) !=
      MPI_SUCCESS) {
    return;
  }
  rank_ = rank;
  peers_ = std::move(all);
  pidfds_.assign(peers_.size(), -1);
#ifdef SYS_pidfd_open
  for (size_t r = 0; r < peers_.size(); ++r) {
    const Endpoint& e = peers_[r];
    if (static_cast<int>(r) == rank_ || e.pid <= 0 || std::strncmp(e.host, mine_.host, sizeof(e.host)) != 0) continue;
    const long fd = syscall(SYS_pidfd_open, static_cast<pid_t>(e.pid), 0);
    pidfds_[r] = fd >= 0 ? static_cast<int>(fd) : -1;  // no pidfd (another pid namespace): not watched
  }
#endif
}

// A process being killed loses its memory before its pid (pidfd) and its
// descriptors say so: MPICH's copy from it fails first, and a call can
// return in between. So a peer whose pidfd is quiet is also asked for one
// byte of its memory (process_vm_readv, as MPICH's copies do): ESRCH says
// its memory is gone; from a live process the bogus address gets EFAULT,
// or EPERM where such reads are not allowed (then the pidfd alone tells).
static bool MemoryGone(pid_t pid) {
  char byte;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(1), 1};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) < 0 && errno == ESRCH;
}

Peers PeerProbe::EndedLocalPeers(const std::vector<int>& ranks) const {
  std::vector<pollfd> fds;
  std::vector<int> watched;
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(pidfds_.size()) || pidfds_[r] < 0) continue;
    fds.push_back({pidfds_[r], POLLIN, 0});
    watched.push_back(r);
  }
  if (fds.empty()) return {};
  const bool any_exited = poll(fds.data(), fds.size(), 0) > 0;
  Peers ended;
  for (size_t i = 0; i < fds.size(); ++i) {
    const bool exited = any_exited && fds[i].revents != 0;
    if (exited || MemoryGone(static_cast<pid_t>(peers_[watched[i]].pid))) ended.push_back({watched[i], mine_.host});
  }
  return ended;
}

std::string PeerProbe::host() const { return mine_.host; }

Peers PeerProbe::Unreachable(const std::vector<int>& ranks, double seconds) const {
  if (listener_ < 0 || peers_.empty()) return {};
  DrainProbes();

  std::map<std::string, std::vector<int>> by_host;  // other hosts' ranks among `ranks`
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(peers_.size()) || r == rank_) continue;
    const Endpoint& e = peers_[r];
    if (e.port == 0 || e.num_addresses == 0 || std::strncmp(e.host, mine_.host, sizeof(e.host)) == 0) continue;
    by_host[e.host].push_back(r);
  }
  struct Try {
    int fd;
    std::string host;
  };
  std::vector<Try> tries;
  std::map<std::string, bool> answered;
  for (const auto& kv : by_host) {
    answered[kv.first] = false;
    // The host's kernel answers for any of its ranks (a refusal counts), so
    // one rank's addresses tell for the host.
    {
      const Endpoint& e = peers_[kv.second.front()];
      for (int i = 0; i < e.num_addresses && i < kMaxAddresses; ++i) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = e.addresses[i];
        to.sin_port = e.port;
        int rc = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
        if (rc == 0 || errno == ECONNREFUSED) {
          answered[kv.first] = true;  // refused: the host answered, the rank is gone
          close(fd);
        } else if (errno == EINPROGRESS) {
          tries.push_back({fd, kv.first});
        } else {
          close(fd);  // no route from here: no answer
        }
      }
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!tries.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    for (const Try& t : tries) fds.push_back({t.fd, POLLOUT, 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) continue;
    std::vector<Try> waiting;
    for (size_t i = 0; i < tries.size(); ++i) {
      if (fds[i].revents == 0) {
        waiting.push_back(tries[i]);
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      getsockopt(tries[i].fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == 0 || error == ECONNREFUSED) answered[tries[i].host] = true;
      close(tries[i].fd);
    }
    tries.swap(waiting);
  }
  for (const Try& t : tries) close(t.fd);
  Peers cut_off;
  for (const auto& kv : by_host) {
    if (answered[kv.first]) continue;
    for (int r : kv.second) cut_off.push_back({r, kv.first});
  }
  return cut_off;
}

void PeerProbe::DrainProbes() const {
  // Probes of this rank wait in the listen backlog; let them go.
  for (int fd; (fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) close(fd);
}

Peers PeerProbe::Ended(const std::vector<int>& ranks, double seconds) const {
  if (listener_ < 0 || peers_.empty()) return {};
  DrainProbes();
  struct Try {
    int fd;
    int rank;
  };
  std::vector<Try> tries;
  Peers ended;  // those that refused
  auto refused = [&](int rank) { ended.push_back({rank, peers_[rank].host}); };
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(peers_.size()) || r == rank_) continue;
    const Endpoint& e = peers_[r];
    if (e.port == 0 || e.num_addresses == 0) continue;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = e.addresses[0];
    to.sin_port = e.port;
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    if (rc != 0 && errno == EINPROGRESS) {
      tries.push_back({fd, r});
      continue;
    }
    if (rc != 0 && errno == ECONNREFUSED) refused(r);
    close(fd);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!tries.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    for (const Try& t : tries) fds.push_back({t.fd, POLLOUT, 0});
    if (poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) continue;
    std::vector<Try> waiting;
    for (size_t i = 0; i < tries.size(); ++i) {
      if (fds[i].revents == 0) {
        waiting.push_back(tries[i]);
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      getsockopt(tries[i].fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error == ECONNREFUSED) refused(tries[i].rank);
      close(tries[i].fd);
    }
    tries.swap(waiting);
  }
  for (const Try& t : tries) close(t.fd);  // no answer: not ended as far as this can tell
  std::sort(ended.begin(), ended.end(), [](const Peer& a, const Peer& b) { return a.rank < b.rank; });
  return ended;
}

}  // namespace mxplugin
