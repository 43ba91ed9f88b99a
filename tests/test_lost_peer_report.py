"""Note [Lost peers as data] (src/core/lost_peer_report.h): what a rank
writes of the peers it lost is what the launcher reads
(mxplugin_run/lost_hosts.py lost_peers), however many they are: each line
short enough to be relayed whole, every peer named once, nothing said
twice, nothing said before the launcher asked."""
import os
import shutil
import subprocess

import pytest

from mpi_harness import REPO
from mxplugin_run.lost_hosts import lost_peers
from mxplugin_run.protocol import LOST_PEERS_MARKER

PIPE_BUF = 4096


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("needs a C++ compiler to build tests/native/lost_peer_report_test.cc")
    out = str(tmp_path_factory.mktemp("lost-peer-report") / "lost_peer_report_test")
    built = subprocess.run([cxx, "-std=c++17", "-O1", "-pthread", "-Wall", "-Werror", "-Isrc", "-I.",
                            "tests/native/lost_peer_report_test.cc", "src/core/lost_peer_report.cc", "-o", out],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return out


def said(lines):
    """(unreachable, ended) that the lines name, in order."""
    reports = [lost_peers(line) for line in lines]
    assert all(r is not None and r["rank"] == 3 and r["host"] == "hostA" for r in reports), lines[:3]
    return [p for r in reports for p in r["unreachable"]], [p for r in reports for p in r["ended"]]


@pytest.mark.parametrize("unreachable, ended, name", [(2, 1, 5), (0, 3, 5), (300, 40, 40), (1, 0, 3000)])
def test_the_lines_name_every_peer_once_each_line_whole(program, unreachable, ended, name):
    done = subprocess.run([program, LOST_PEERS_MARKER, "3", "hostA", str(unreachable), str(ended), str(name)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "", done
    first, again, more = (part.splitlines(keepends=True) for part in done.stderr.split("--\n"))
    if name < 1000:  # a peer whose host name alone passes PIPE_BUF cannot be kept within it
        assert all(len(line.encode()) < PIPE_BUF for line in first + more), max(map(len, first + more))
    if unreachable + ended > 150:
        assert len(first) > 1, "many peers: several lines"
    cut_off = [(1000 + i, "h" * name + str(i // 4)) for i in range(unreachable)]
    gone = [(1000 + unreachable + i, "h" * name + "e" + str(i // 4)) for i in range(ended)]
    assert said(first) == (cut_off, gone)
    assert again == []  # nobody new
    assert said(more) == (cut_off + [(1000 + unreachable + ended, "late")], gone)
