"""A fake host cut off from the network mid-training (the host side of its
link set down: its processes live on, nothing reaches them; Note
[Partitions] in mxplugin_run/elastic/world_end.py). Elastic training: with and
without discovery reporting the host gone, the link restored, the host
found still cut when its cool-down ends (Note [Hosts that cannot reach
the launcher] in mxplugin_run/elastic/driver.py) and tried once its link is back, and SIGTERM to the launcher while the
host is cut; the digits MLP of examples/mxnet_elastic_digits.py trains,
past its epochs until the test has seen what it waits for. A plain job: every reachable rank fails naming the
host (Note [Stuck transfers], Note [Lost hosts]). Every test waits until
nothing it started runs any more in the cluster's namespaces. Skips, saying
why, where namespaces cannot be made (not root, no `ip`)."""
import itertools
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from chaos_log import MIN_ACCURACY, reached_accuracy
from fake_cluster import ENV, IFACE, FakeCluster
from mpi_harness import HANG_S, REPO, rank_env
from mxplugin_run.protocol import STOP_HEADER
from mxplugin_run.timeouts import LAUNCHER_GONE_S, LONG_POLL_S
from mxplugin_run.elastic.service import DriverService
from mxplugin_run.hosts_not_reached import HostsNotReached
from mxplugin_run.lost_hosts import lost_peers
from mxplugin_run.remote_shells import placed_hosts

WHY_NOT = FakeCluster.unavailable()
needs_cluster = pytest.mark.skipif(WHY_NOT is not None, reason=f"fake-host cluster: {WHY_NOT}")
EXAMPLE = os.path.join(REPO, "examples", "mxnet_elastic_digits.py")
ALLREDUCE_UNTIL_CUT = os.path.join(REPO, "tests", "spmd", "allreduce_until_cut.py")
COMMIT_EVERY = 3
RUN_TIMEOUT_S = 240
CUT = 2  # the host cut off: the third (the launcher runs on the first)
ELASTIC_PEER_TIMEOUT_S = 30  # the launcher's default for elastic jobs
# How long these take (the first step of the next world after a cut, the
# launcher's exit after SIGTERM, each rank's error) is measured by
# bench/fault_timings.py; the tests check what makes them quick and fail
# only at a hang (Note [Hang limits] in mpi_harness.py).

STEP = re.compile(r"^step (\d+): epoch (\d+), (\d+) ranks")
COMMIT = re.compile(r"^commit (\d+): step (\d+)")
COMMITTING = re.compile(r"^committing (\d+): ")
RESUMES_AT = re.compile(r"^rank 0 of \d+ resumes at step (\d+)")
# Lines every step or epoch prints, left out of a failure's message.
QUIET = re.compile(r"^\s*(step \d+: |commit \d+: |committing \d+: |epoch \d+: test accuracy)")


@pytest.fixture(scope="module")
def cluster():
    with FakeCluster(3) as c:
        yield c


class Run:
    """The launcher on the first host, training the example until release()."""

    def __init__(self, cluster, name, *options, env_extra=None, drop_env=()):
        self.cluster = cluster
        self.release_file = os.path.join(cluster.dir, f"release-{name}")
        argv = [sys.executable, "-m", "mxplugin_run", "--rsh", cluster.rsh, "--network-interface", IFACE,
                "--min-np", "2", "--max-np", "3", *options, sys.executable, EXAMPLE, "--epochs", "8", "--log-steps",
                "--commit-every", str(COMMIT_EVERY), "--min-accuracy", str(MIN_ACCURACY), "--until-exists", self.release_file]
        env = rank_env({**ENV, **(env_extra or {})})
        for name in drop_env:
            env.pop(name, None)
        self.proc, self.log = cluster.start(0, argv, env=env, cwd=REPO)

    def wait_for(self, predicate, timeout=120):
        found = self.log.wait_for(predicate, timeout)
        assert found, self.report()
        return found

    def release(self):
        open(self.release_file, "w").close()

    def finish(self, timeout=RUN_TIMEOUT_S):
        """Lets the training end; the launcher's exit code."""
        self.release()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"did not finish within {timeout} s:\n{self.report()}") from None
        self.log.thread.join(timeout=10)
        return self.proc.returncode

    def text(self):
        return self.log.text()

    def report(self):
        """The output without its step and commit lines, for a failure's message."""
        lines = [line for line in self.text().splitlines() if not QUIET.match(line)]
        text = "\n".join(lines)
        if len(text) > 8000:  # the start says how the worlds formed, the end where it stopped
            text = text[:3000] + "\n[...]\n" + text[-5000:]
        return f"exit {self.proc.poll()}\n" + text


def steps_at(ranks):
    return lambda line: (m := STEP.match(line)) is not None and int(m.group(3)) == ranks


def after(index, predicate):
    """`predicate` on the lines after line `index` only (LineLog.wait_for
    looks at the lines in order, from the first)."""
    position = itertools.count()
    return lambda line: next(position) > index and predicate(line)


def lost_line(host, cooldown_s):
    """The launcher's line on rank 2 lost with `host` (a regex-escaped
    name), left out for `cooldown_s`; a healthy rank whose MPI crashed once
    the world was broken may be listed with it, its host kept (Note
    [One rule for a world's end] in mxplugin_run/elastic/rank_ends.py)."""
    return (rf"lost (rank \d on \S+ \([^)]*\), )?rank 2 on {host} \(.*\)( \(kept for the next world: [^)]*\))?; "
            rf"left out: {host} for {cooldown_s} s")


def commit_line(n):
    return lambda line: (m := COMMIT.match(line)) is not None and int(m.group(1)) >= n


def write_hosts(path, cluster, indexes):
    with open(path + ".tmp", "w") as f:
        f.write("".join(f"{cluster.hosts[i]}:1\n" for i in indexes))
    os.replace(path + ".tmp", path)  # the launcher never reads half a list


def wait_until_nothing_runs(cluster, indexes, timeout):
    """Seconds until no process is left in those hosts' namespaces; fails
    (killing them: they are this test's) if some outlive `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if not any(cluster.pids(i, "") for i in indexes):
            return time.monotonic() - start
        time.sleep(0.2)
    left = {cluster.hosts[i]: {pid: _command_line(pid) for pid in cluster.pids(i, "")} for i in indexes}
    cluster.kill_processes()
    raise AssertionError(f"still running {timeout} s later: {left}")


def _command_line(pid):
    """What process `pid` runs, for a failure's message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "(gone)"


@pytest.fixture
def cut_link(cluster):
    """Every link up and forwarding when the test starts; afterwards,
    whatever the test did (the cluster is the module's), nothing of it left
    running and the cut host's link restored, without a rate limit (Note
    [Links that are ready] in fake_cluster.py)."""
    for i in range(len(cluster.hosts)):
        cluster.wait_for_link(i, "up")
    yield
    cluster.kill_processes()
    cluster.limit_rate(CUT, None)
    cluster.set_link(CUT, "up")


def resumed_from_last_commit(run, world):
    """Steps lost: the next world starts from the newest commit before it.
    Rank 0 prints "commit N" once commit() returns, after its host check, a
    collective that the rank cut off may never join: so the newest commit
    is the last one printed or, its snapshot taken ("committing N" printed)
    but the line not, the next one (a run under load cut the link during
    commit 5's host check: "commit 4" was the last line, world 1 resumed
    from commit 5)."""
    lines = run.text().splitlines()
    start = next(i for i, line in enumerate(lines) if f"world {world}: " in line and "ranks on" in line)
    resumed = next(i for i, line in enumerate(lines) if i > start and "resumes from commit" in line)
    # The old world's last lines may reach the output after the launcher's
    # line about the new world (their ways differ: a CI run printed "commit 5"
    # after "world 1: ... ranks on"), never after the new world resumes.
    before = lines[:resumed]
    printed = max((m for m in map(COMMIT.match, before) if m), key=lambda m: int(m.group(1)))
    snapshots = {int(m.group(1)) for m in map(COMMITTING.match, before) if m}
    m = re.search(r"resumes from commit (\d+)", lines[resumed])
    commit = int(m.group(1)) if m else None
    assert commit == int(printed.group(1)) or (commit == int(printed.group(1)) + 1 and commit in snapshots), \
        run.report()
    at_step = next(int(r.group(1)) for r in map(RESUMES_AT.match, lines[resumed:]) if r)
    last_step = max(int(m.group(1)) for m in map(STEP.match, before) if m)
    return last_step - at_step


@needs_cluster
def test_a_host_cut_off_that_discovery_drops_costs_only_the_steps_since_the_last_commit(cluster, cut_link):
    hosts_file = os.path.join(cluster.dir, "hosts-dropped")
    write_hosts(hosts_file, cluster, (0, 1, 2))
    run = Run(cluster, "dropped", "--host-discovery-script", f"cat {hosts_file}")
    run.wait_for(commit_line(4))
    cut_at = cluster.set_link(CUT, "down")
    write_hosts(hosts_file, cluster, (0, 1))
    resumed = run.wait_for(steps_at(2))
    took = resumed[1] - cut_at
    # The rank cut off leaves by itself (its processes with it), the launcher
    # having nothing to tell it.
    wait_until_nothing_runs(cluster, [CUT], timeout=90)
    gone_after = time.monotonic() - cut_at
    code = run.finish()
    text, report = run.text(), run.report()
    assert code == 0, report
    host = cluster.hosts[CUT]
    assert f"{host} gone, so the ranks go back to their last commit now" in text, report
    assert re.search(rf"abandoning mpiexec; left behind: {host} \(rank 2\)", text), report
    assert f"left out while discovery does not list them: {host}" in text, report
    lost = resumed_from_last_commit(run, 1)
    assert 0 <= lost <= COMMIT_EVERY, report
    assert reached_accuracy(text), report
    wait_until_nothing_runs(cluster, range(3), timeout=30)
    print(f"cut to first step at 2 ranks (discovery drops the host): {took:.1f} s; steps lost {lost}; "
          f"the cut rank's processes gone {gone_after:.1f} s after the cut")
    assert took < HANG_S, report


@needs_cluster
def test_a_host_cut_off_that_the_launcher_is_not_told_of(cluster, cut_link):
    """A fixed host list, and the launcher's default peer timeout: the
    launcher finds the host's rank silent (or the survivors' collectives
    time out) and goes on without it."""
    run = Run(cluster, "fixed", "-H", cluster.host_list((1, 1, 1)), drop_env=("MXPLUGIN_PEER_TIMEOUT_SECONDS",))
    run.wait_for(commit_line(4))
    cut_at = cluster.set_link(CUT, "down")
    resumed = run.wait_for(steps_at(2), timeout=ELASTIC_PEER_TIMEOUT_S + 60)
    took = resumed[1] - cut_at
    wait_until_nothing_runs(cluster, [CUT], timeout=90)
    gone_after = time.monotonic() - cut_at
    code = run.finish()
    text, report = run.text(), run.report()
    assert code == 0, report
    host = cluster.hosts[CUT]
    assert re.search(lost_line(host, 30), text), report
    assert re.search(rf"left behind: {host} \(rank 2\)", text), report
    lost = resumed_from_last_commit(run, 1)
    assert 0 <= lost <= COMMIT_EVERY, report
    assert reached_accuracy(text), report
    wait_until_nothing_runs(cluster, range(3), timeout=30)
    print(f"cut to first step at 2 ranks (nobody tells the launcher): {took:.1f} s; steps lost {lost}; "
          f"the cut rank's processes gone {gone_after:.1f} s after the cut")
    assert took < ELASTIC_PEER_TIMEOUT_S + HANG_S, report


@needs_cluster
def test_a_cut_host_rejoins_at_a_later_commit_when_its_link_returns(cluster, cut_link):
    hosts_file = os.path.join(cluster.dir, "hosts-rejoin")
    write_hosts(hosts_file, cluster, (0, 1, 2))
    run = Run(cluster, "rejoin", "--host-discovery-script", f"cat {hosts_file}")
    run.wait_for(commit_line(4))
    cluster.set_link(CUT, "down")
    write_hosts(hosts_file, cluster, (0, 1))
    run.wait_for(steps_at(2))
    cluster.set_link(CUT, "up")
    write_hosts(hosts_file, cluster, (0, 1, 2))
    grown = run.wait_for(lambda line: "world 2: 3 ranks on" in line)
    run.wait_for(after(grown[0], steps_at(3)))
    code = run.finish()
    text, report = run.text(), run.report()
    assert code == 0, report
    # World 1 ended at a commit for the host that came back, and world 2
    # starts from it: the rank cut off in world 0 handed nothing over.
    ended = re.search(r"hosts changed: ending this world at commit (\d+)", text)
    resumed = re.findall(r"world 2 of 3 ranks resumes from commit (\d+)", text)
    assert ended and resumed == [ended.group(1)], report
    assert reached_accuracy(text), report
    wait_until_nothing_runs(cluster, range(3), timeout=60)


def cut_past_its_cool_down(cluster, name):
    """A run whose host CUT is cut off at commit 4 while discovery still
    lists it: its rank is lost, the host is left out for its first cool-down
    (5 s), and when that ends with the link still cut, the host answers the
    remote shell but cannot connect to the launcher from there: it is left
    out again (10 s) before any world is tried on it (Note [Hosts that
    cannot reach the launcher] in mxplugin_run/elastic/driver.py; a world started
    there could not start, and mpiexec's giving up would tear it down under
    the other hosts' ranks inside MPI's start). Returns (run, seconds from
    the cut, the line that names the host)."""
    hosts_file = os.path.join(cluster.dir, f"hosts-{name}")
    write_hosts(hosts_file, cluster, (0, 1, 2))
    run = Run(cluster, name, "--host-discovery-script", f"cat {hosts_file}", "--blacklist-cooldown-range", "5", "20",
              env_extra={"MXPLUGIN_PEER_TIMEOUT_SECONDS": "10"})
    run.wait_for(commit_line(4))
    cut_at = cluster.set_link(CUT, "down")
    host = re.escape(cluster.hosts[CUT])
    lost = run.wait_for(re.compile(lost_line(host, 5)).search)
    # The cause is the kernel's: "No route to host" once ARP gives up, or
    # "Network is unreachable".
    refused = run.wait_for(after(lost[0], re.compile(
        rf"^mxplugin-run: elastic: {host}'s cool-down is over but it cannot reach the launcher: {host} \(cannot "
        rf"connect to the launcher at \S+: [^)]+\); left out for 10 s$").search))
    return run, refused[1] - cut_at, refused


@needs_cluster
def test_a_host_still_cut_off_when_its_cool_down_ends_is_left_out_again_and_the_job_finishes(cluster, cut_link):
    """Issue 48: the cut host's cool-down ends while its link is still cut;
    it is left out again, no world is tried on it, and the job goes on
    without it (it used to stop: "no rank started")."""
    run, refused_after, refused = cut_past_its_cool_down(cluster, "still-cut")
    resumed = run.wait_for(after(refused[0], steps_at(2)))
    code = run.finish()
    text, report = run.text(), run.report()
    assert code == 0, report
    host = cluster.hosts[CUT]
    assert "no rank started" not in text and "could not start on" not in text, report
    assert not re.search(rf"world \d+: 3 ranks on .*{re.escape(host)}", text[text.index(refused[2]):]), report
    assert reached_accuracy(text), report
    wait_until_nothing_runs(cluster, range(3), timeout=60)
    print(f"cut to the host left out again after its cool-down: {refused_after:.1f} s; from its line to the next "
          f"step: {resumed[1] - refused[1]:.1f} s")


@needs_cluster
def test_a_host_cut_off_past_its_cool_down_rejoins_once_its_link_returns(cluster, cut_link):
    """The host still cut when its cool-down ended is tried again after its
    next cool-down (10 s): its link is back by then, and the world grows."""
    run, _, refused = cut_past_its_cool_down(cluster, "back-later")
    restored_at = cluster.set_link(CUT, "up")
    grown = run.wait_for(after(refused[0], lambda line: re.search(r"world \d+: 3 ranks on", line) is not None))
    stepped = run.wait_for(after(grown[0], steps_at(3)))
    code = run.finish()
    text, report = run.text(), run.report()
    assert code == 0, report
    host = cluster.hosts[CUT]
    assert f"{host}'s cool-down is over (left out after its fault 2: it could not reach the launcher after its " \
        "cool-down" in text, report
    assert reached_accuracy(text), report
    wait_until_nothing_runs(cluster, range(3), timeout=60)
    print(f"link restored to the first step of 3 ranks: {stepped[1] - restored_at:.1f} s")


@needs_cluster
def test_sigterm_ends_the_launcher_within_10_s_while_a_host_is_cut(cluster, cut_link):
    run = Run(cluster, "sigterm", "-H", cluster.host_list((1, 1, 1)))
    run.wait_for(commit_line(4))
    cluster.set_link(CUT, "down")  # the ranks are stuck within a step from here on
    sent = time.monotonic()
    os.kill(run.proc.pid, signal.SIGTERM)  # `ip netns exec` execs: this is the launcher
    try:
        run.proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {HANG_S} s after SIGTERM:\n{run.report()}") from None
    took = time.monotonic() - sent
    text, report = run.text(), run.report()
    assert run.proc.returncode == 128 + signal.SIGTERM, report
    assert "interrupted (SIGTERM): stopping all 3 ranks" in text, report
    assert re.search(rf"abandoning mpiexec; left behind: {cluster.hosts[CUT]} \(rank 2\)$", text, re.M), report
    print(f"SIGTERM to the launcher's exit with a host cut: {took:.1f} s")
    assert took < HANG_S, report
    # A reachable rank hears the stop at once, or, if the launcher was gone
    # before its long poll came back, leaves LAUNCHER_GONE_S after (seen once
    # in a CI run: 3 processes of a reachable host still there 30 s later)
    wait_until_nothing_runs(cluster, [0, 1], timeout=LAUNCHER_GONE_S + LONG_POLL_S + 20)
    wait_until_nothing_runs(cluster, [CUT], timeout=90)


@needs_cluster
def test_a_plain_job_ends_every_reachable_rank_naming_the_host_cut_off(cluster, cut_link):
    """2 hosts x 2 ranks, not elastic, the second host cut mid-allreduce (its
    link slowed so that a round's transfer takes seconds): the first host's
    ranks, stuck inside MPI, end within the peer timeout naming the host
    (Note [A verdict within the timeout]; the allowance is for the line's
    way through mpiexec and the launcher), and the launcher gives up on
    mpiexec."""
    peer_timeout = 10
    near, far = cluster.hosts[0], cluster.hosts[CUT]
    cluster.limit_rate(CUT, "100mbit")
    argv = [sys.executable, "-m", "mxplugin_run", "--rsh", cluster.rsh, "--network-interface", IFACE, "-np", "4",
            "-H", f"{near}:2,{far}:2", sys.executable, ALLREDUCE_UNTIL_CUT, str(8 << 20)]
    proc, log = cluster.start(0, argv, env=rank_env({**ENV, "MXPLUGIN_PEER_TIMEOUT_SECONDS": peer_timeout}),
                              cwd=REPO)
    assert log.wait_for(lambda line: line == "round 2", 120), log.text()
    cut_at = cluster.set_link(CUT, "down")
    failed = {}
    for rank in (0, 1):
        named = re.compile(rf"^(mxplugin: )?rank {rank}(:| failed:) .*\branks 2, 3 on {far} cannot be reached from "
                           rf"{near}\b")
        found = log.wait_for(named.search, peer_timeout + 60)
        assert found, log.text()
        failed[rank] = found[1] - cut_at
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the launcher still runs 60 s after the ranks failed:\n{log.text()}") from None
    ended = time.monotonic() - cut_at
    log.thread.join(timeout=10)
    assert "mxplugin-peers-lost" not in log.text(), log.text()  # read by the launcher, not shown
    text = log.text()
    assert proc.returncode == 1, text
    # Either mpiexec waits for the cut host's proxy and the launcher gives up
    # on it (Note [Lost hosts]), or a rank's exit without finishing MPI made
    # MPICH stop the job, which ends mpiexec (its remote shells are local
    # here); the launcher then says which rank ended first and how (Note
    # [Exits and kills]), never that it was killed.
    abandoned = re.search(rf"abandoning mpiexec; left behind: {far}$", text, re.M)
    stopped = re.search(r"^mxplugin-run: rank [01] \(pid \d+ on \S+\) ended first: it exited with code 1 without "
                        r"finishing MPI; mpiexec stopped the other ranks$", text, re.M)
    assert abandoned or stopped, text
    wait_until_nothing_runs(cluster, [0, CUT], timeout=60)
    print(f"cut to each reachable rank's error naming the host: {failed[0]:.1f} s, {failed[1]:.1f} s (peer "
          f"timeout {peer_timeout} s); to the launcher's exit: {ended:.1f} s "
          f"({'mpiexec abandoned' if abandoned else 'mpiexec stopped the job'})")
    assert max(failed.values()) < peer_timeout + HANG_S, text


# -- the launcher's pieces on their own (no cluster) --------------------------------------------

@pytest.fixture
def service():
    s = DriverService()
    yield s
    s.server.server_close()


def three_ranks(service):
    world = service.new_world(0, [("a", 1), ("b", 1), ("c", 1)])
    for rank in range(3):
        service.handle("POST", "/register", {"world": "0", "rank": str(rank)}, b"")
    return world


def test_a_host_discovery_drops_breaks_the_world_and_is_not_waited_for(service):
    world = three_ranks(service)
    service.mark_hosts_gone(["c"], "host discovery no longer lists it")
    assert world.broken == "c is gone (host discovery no longer lists it)"
    for rank in (0, 1):
        service.handle("POST", "/leave", {"world": "0", "rank": str(rank), "reason": "failure"}, b"")
    assert service.wait_settled(5, 5)  # at once: rank 2 is on the dropped host
    assert service.unaccounted() == [(2, "c")]


def test_a_rank_that_lost_contact_breaks_the_world_for_the_others(service):
    world = three_ranks(service)
    service.handle("POST", "/leave", {"world": "0", "rank": "1", "reason": "failure"}, b"")
    assert world.broken == "rank 1 on b lost contact with its peers"


def test_a_silent_rank_breaks_the_world_and_is_not_waited_for(service):
    world = three_ranks(service)
    world.heard[2] -= 60  # its last request, a minute ago
    service.break_if_silent(15)
    assert world.broken == "rank 2 on c not heard from for 15 s (cut off?)"
    for rank in (0, 1):
        service.handle("POST", "/leave", {"world": "0", "rank": str(rank), "reason": "failure"}, b"")
    assert service.wait_settled(5, 5)


def test_the_users_stop_is_the_answer_to_every_long_poll(service):
    three_ranks(service)
    service.stop_ranks()
    status, headers, _ = service.handle("GET", "/broken", {"world": "0", "rank": "0", "wait": "5"}, b"")
    assert status == 200 and headers == {STOP_HEADER: "1"}


def test_a_rank_of_an_ended_world_hands_nothing_over(service):
    three_ranks(service)
    service.new_world(1, [("a", 1), ("b", 1)])
    assert service.handle("PUT", "/state", {"world": "0", "rank": "2", "commit": "99"}, b"stale")[0] == 409
    assert service.state_commit() == -1


def test_the_peers_a_rank_says_it_lost_are_read_as_fields():
    """Note [Lost peers as data]: the line's fields, a --prefix-output tag
    before them or not; the error's prose names hosts too but is no report."""
    line = "[0]<stderr>:mxplugin-peers-lost 0 a unreachable=2@b,3@b,4@c.x ended=1@a"
    assert lost_peers(line) == {"rank": 0, "host": "a", "unreachable": [(2, "b"), (3, "b"), (4, "c.x")],
                                "ended": [(1, "a")]}
    assert lost_peers("mxplugin-peers-lost 5 b unreachable= ended=0@a")["unreachable"] == []
    prose = ("mxplugin: rank 0: mxplugin lost contact with its peers: ranks 2, 3 on b cannot be reached from a "
             "(no answer within 1000 ms): a transfer ...")
    for other in (prose, "mxplugin-peers-lost 0 a unreachable=2@b", "mxplugin-peers-lost 0 a ended= unreachable=",
                  "mxplugin-peers-lost x a unreachable= ended=", "mxplugin-peers-lost 0 a unreachable=b ended=",
                  "mxplugin-peers-lost \u00b2 a unreachable= ended=", "mxplugin-peers-lost 0 a unreachable=\u00b2@b ended="):
        assert lost_peers(other) is None, other
    assert placed_hosts([("a", 2), ("b", 2), ("c", 2)], 3) == ["a", "b"]


def test_the_hosts_mpiexec_says_it_cannot_reach_at_a_jobs_start():
    """Hydra's lines, numbered by proxy (the hosts with ranks, in order),
    whole or split between two reads; ssh's naming the host; nothing else."""
    found = HostsNotReached(placed_hosts([("a", 1), ("b", 1), ("c", 1)], 3))
    err, out = found.reader(), found.reader()
    err(b'[proxy:2@vm] HYDU_sock_connect (/mpich/src/pm/hydra/lib/utils/sock.c:140): unable to connect from "vm"')
    out(b"step 3: epoch 1, 3 ranks\n[proxy:7@vm] HYDU_sock_connect (sock.c:140): unable to connect (x)\n")
    err(b' to "10.79.0.11" (No route to host)\n[proxy:2@vm] main (pmip.c:100): unable to connect to server '
        b'10.79.0.11 at port 35525 (check for firewalls!)\n[mpiexec@vm] ui_cmd_cb (pmiserv_pmci.c:51): Launch '
        b'proxy failed.\n')
    out(b"ssh: connect to host b port 22: Connection timed out\nssh: connect to host z port 22: No route to host")
    out.flush()
    assert found.hosts() == {"c": "its MPI proxy could not connect back to mpiexec: No route to host",
                             "b": "ssh could not reach it: Connection timed out"}
    quiet = HostsNotReached(["a", "b"])
    quiet.reader()(b"[proxy:0@vm] [proxy:0@vm] assert (!upstream_sock_closed) failed\nmxplugin: ssh: no\n")
    assert quiet.hosts() == {}
