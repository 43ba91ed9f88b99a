#include "backend/peers.h"

#include <sstream>

namespace mxplugin {

std::string PeersText(const Peers& peers) {
  std::vector<std::string> hosts;
  std::vector<std::vector<int>> ranks;
  for (const Peer& p : peers) {
    size_t i = 0;
    while (i < hosts.size() && hosts[i] != p.host) ++i;
    if (i == hosts.size()) {
      hosts.push_back(p.host);
      ranks.emplace_back();
    }
    ranks[i].push_back(p.rank);
  }
  std::ostringstream text;
  for (size_t h = 0; h < hosts.size(); ++h) {
    text << (h ? "; " : "") << (ranks[h].size() == 1 ? "rank " : "ranks ");
    for (size_t i = 0; i < ranks[h].size(); ++i) text << (i ? ", " : "") << ranks[h][i];
    text << " on " << hosts[h];
  }
  return text.str();
}

std::string EndedText(const Peers& ended) {
  return PeersText(ended) + (ended.size() == 1 ? " has" : " have") + " ended";
}

Status LostContact(const std::string& what) { return Status::Aborted("mxplugin lost contact with its peers: " + what); }

}  // namespace mxplugin
