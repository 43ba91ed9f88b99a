// Writes what LostPeerReport says for the verdict its arguments describe:
//   lost_peer_report_test MARKER RANK HOST UNREACHABLE ENDED HOST_NAME_LENGTH
// with UNREACHABLE and ENDED peer counts, four on each host, named by
// HOST_NAME_LENGTH characters; then the same verdict again (nothing new: no
// line) and with one peer more (the verdict said again). "--" on stderr
// between the three.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/lost_peer_report.h"

using mxplugin::LostPeerReport;
using mxplugin::PeerVerdict;

int main(int argc, char** argv) {
  if (argc != 7) return 2;
  const int rank = std::atoi(argv[2]);
  const int unreachable = std::atoi(argv[4]);
  const int ended = std::atoi(argv[5]);
  const std::string name(std::atoi(argv[6]), 'h');
  PeerVerdict who;
  int next = 1000;
  for (int i = 0; i < unreachable; ++i) who.unreachable.push_back({next++, name + std::to_string(i / 4)});
  for (int i = 0; i < ended; ++i) who.ended.push_back({next++, name + "e" + std::to_string(i / 4)});
  LostPeerReport report;
  report.Say(rank, argv[3], who);  // no marker yet: nothing
  report.SayWith(argv[1]);
  report.Say(rank, argv[3], who);
  std::fputs("--\n", stderr);
  report.Say(rank, argv[3], who);
  std::fputs("--\n", stderr);
  who.unreachable.push_back({next, "late"});
  report.Say(rank, argv[3], who);
  return 0;
}
