#include "core/lost_peer_report.h"

#include <unistd.h>

namespace mxplugin {
namespace {

std::string Field(const char* name, const Peers& peers) {
  std::string text = std::string(" ") + name + "=";
  for (size_t i = 0; i < peers.size(); ++i) {
    text += (i ? "," : "") + std::to_string(peers[i].rank) + "@" + peers[i].host;
  }
  return text;
}

}  // namespace

void LostPeerReport::SayWith(std::string marker) {
  std::lock_guard<std::mutex> lock(mutex_);
  marker_ = std::move(marker);
}

void LostPeerReport::Say(int rank, const std::string& host, const PeerVerdict& who) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (marker_.empty() || who.empty()) return;
  bool news = false;
  for (const Peer& p : who.unreachable) news |= named_.insert({p.rank, false}).second;
  for (const Peer& p : who.ended) news |= named_.insert({p.rank, true}).second;
  if (!news) return;
  // One write: the relay passes whole lines, and a line within PIPE_BUF is never split.
  const std::string line = marker_ + " " + std::to_string(rank) + " " + host + Field("unreachable", who.unreachable) +
                           Field("ended", who.ended) + "\n";
  ssize_t written = write(2, line.data(), line.size());
  (void)written;
}

}  // namespace mxplugin
