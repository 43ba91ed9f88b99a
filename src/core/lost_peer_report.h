// The line a rank writes when it has lost peers, for its launcher to read.
//
// Note [Lost peers as data]: a plain job's launcher must know which hosts
// its ranks cannot reach (Note [Lost hosts] in mxplugin_run/lost_hosts.py),
// and it hears nothing of the ranks but their output. So a rank behind the
// launcher's line relay also says whom it lost in a line of fields, never
// in its error's prose, beginning with the marker the launcher gave
// (mxplugin_run/protocol.py, LOST_PEERS_MARKER):
//
//   <marker> <rank> <host> unreachable=<rank>@<host>,... ended=<rank>@<host>,...
//
// (a field with no peers is "unreachable=", "ended="; many peers take
// several lines, each short enough to be relayed whole). Said once for each
// verdict that names a peer not named before. Any thread: the core's, the
// transfer watchdog's.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "backend/world.h"

namespace mxplugin {

class LostPeerReport {
 public:
  // Begins saying, with `marker` ("" stops).
  void SayWith(std::string marker);
  // Writes the line for `who`, seen by world rank `rank` on `host`, unless
  // it names nobody new or nobody asked for the lines.
  void Say(int rank, const std::string& host, const PeerVerdict& who);

 private:
  std::mutex mutex_;
  std::string marker_;
  std::set<std::pair<int, bool>> named_;  // (rank, ended) already said
};

}  // namespace mxplugin
