// Which peers this rank cannot reach over the network.
//
// Note [Who is unreachable]: when negotiation or a transfer stalls, "a peer
// has probably died" does not tell the user which of many hosts to look at,
// and MPI cannot tell either: its calls with a peer behind a dead link just
// wait. So at start-up every rank opens a TCP listening socket, and the
// ranks exchange their host's name (the one the launcher placed them by:
// PMI_HOSTNAME, set by MPICH's Hydra; else MPI's processor name), their
// IPv4 addresses and that port. On a stall a rank tries to connect to the
// ranks of every other host: the kernel there completes the handshake (or
// refuses it, if the rank has ended) in one round trip even while the rank
// is busy, so a host that does not answer within the probe's time is cut
// off from this one. Nothing here uses MPI after the exchange.
//
// A rank whose process has ended is told the same way: its own port is
// closed, so its host's kernel refuses a connection to it at once. A rank
// that forked (data-loader workers) may leave the port open in a child:
// then it is not named, and the wait goes on as before.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/peers.h"

namespace mxplugin {

class PeerProbe {
 public:
  // Opens the listening socket; without one (no IPv4, say) this rank is
  // never probed and never names anyone.
  PeerProbe();
  ~PeerProbe();
  PeerProbe(const PeerProbe&) = delete;
  PeerProbe& operator=(const PeerProbe&) = delete;

  // Collective over `comm`, whose ranks are the world's: every rank's host
  // and endpoint. MPI's thread only.
  void Exchange(MPI_Comm comm, int rank);
  // Those of `ranks` (world ranks) on other hosts that answer on none of
  // their addresses within `seconds`; none when every host answers or
  // nothing can be told. Any thread.
  Peers Unreachable(const std::vector<int>& ranks, double seconds) const;
  // Those of `ranks` (world ranks, this host's too) on hosts that answer,
  // whose own port refuses a connection within `seconds`: their process
  // has ended. Any thread.
  Peers Ended(const std::vector<int>& ranks, double seconds) const;
  // Those of `ranks` (world ranks) on this host whose process has ended,
  // polled without waiting (a pidfd each, opened at the exchange; none
  // where the kernel has none). Note [Peers ended mid-call] in
  // mpi_communicator.cc. Any thread.
  Peers EndedLocalPeers(const std::vector<int>& ranks) const;
  // This rank's host, as the others know it.
  std::string host() const;

 private:
  static constexpr int kMaxAddresses = 4;
  struct Endpoint {
    char host[64];
    uint32_t addresses[kMaxAddresses];  // IPv4, network byte order
    uint16_t port;                      // network byte order; 0: none
    uint16_t num_addresses;
    int32_t pid;
  };

  // Accepts and closes the probes of this rank waiting in the listen backlog.
  void DrainProbes() const;

  int listener_ = -1;
  int rank_ = -1;
  Endpoint mine_{};
  std::vector<Endpoint> peers_;  // by world rank
  std::vector<int> pidfds_;      // by world rank: this host's other ranks, else -1
};

}  // namespace mxplugin
