// Peers a rank has lost, as data (which world ranks, on which hosts), and
// the one wording of every error that names them.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace mxplugin {

// A peer a probe named: its world rank and its host, as mpiexec knows it.
struct Peer {
  int rank;
  std::string host;
};
using Peers = std::vector<Peer>;

// "rank 2 on host1", "ranks 2, 3 on host2; rank 5 on host4": grouped by
// host, hosts in the order first named; "" for none.
std::string PeersText(const Peers& peers);
// "<PeersText> has ended" or "... have ended", the verb agreeing.
std::string EndedText(const Peers& ended);
// The one status of a lost peer, whatever found it (launchers and tests
// read its words): "mxplugin lost contact with its peers: <what>".
Status LostContact(const std::string& what);

}  // namespace mxplugin
