#include "core/lost_peer_report.h"

#include <unistd.h>

namespace mxplugin {
namespace {

// A line within PIPE_BUF is written, and relayed, whole (Note [Whole lines]
// in mxplugin_run/whole_lines.py); more peers than fit take more lines.
constexpr size_t kMostLineBytes = 2048;

void WriteLine(const std::string& line) {
  ssize_t written = write(2, line.data(), line.size());
  (void)written;
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
  // Each line names some of the peers, each of them once, in fields of
  // their own kind: the launcher gathers the lines.
  const std::string head = marker_ + " " + std::to_string(rank) + " " + host;
  std::string unreachable, ended;
  auto flush = [&] {
    WriteLine(head + " unreachable=" + unreachable + " ended=" + ended + "\n");
    unreachable.clear();
    ended.clear();
  };
  auto add = [&](std::string* field, const Peer& p) {
    const std::string named = std::to_string(p.rank) + "@" + p.host;
    if (head.size() + unreachable.size() + ended.size() + named.size() + 32 > kMostLineBytes &&
        !(unreachable.empty() && ended.empty())) {
      flush();
    }
    *field += (field->empty() ? "" : ",") + named;
  };
  for (const Peer& p : who.unreachable) add(&unreachable, p);
  for (const Peer& p : who.ended) add(&ended, p);
  flush();
}

}  // namespace mxplugin
