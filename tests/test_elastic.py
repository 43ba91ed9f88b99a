"""Elastic training on a cluster of fake hosts (tests/fake_cluster.py):
mxplugin-run --min-np/--max-np with ranks lost, hosts added, the reset
limit, every rank lost at once, and --min-np out of reach; sharded
optimizer states and PowerSGD's state carried into the new world. The digits MLP
of examples/mxnet_elastic_digits.py trains throughout, with its
per-step and per-commit lines (rank 0) as the record of what happened, and
past its epochs until the test has seen what it waits for (a kill, a new
world), so that no run ends too soon on a fast machine.
Skips, saying why, where namespaces cannot be made (not root, no `ip`)."""
import itertools
import os
import re
import subprocess
import sys
import time

import pytest

from chaos_log import MIN_ACCURACY, reached_accuracy
from fake_cluster import ENV, IFACE, FakeCluster
from mpi_harness import HANG_S, REPO, rank_env

WHY_NOT = FakeCluster.unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"fake-host cluster: {WHY_NOT}")
EXAMPLE = os.path.join(REPO, "examples", "mxnet_elastic_digits.py")
COMMIT_EVERY = 3
RUN_TIMEOUT_S = 300
# Survivors notice a lost peer within this (the launcher's default is longer).
PEER_TIMEOUT = {"MXPLUGIN_PEER_TIMEOUT_SECONDS": "10"}
RUN_NUMBERS = itertools.count()  # each run's own release file in the module's cluster


@pytest.fixture(scope="module")
def cluster():
    with FakeCluster(3) as c:
        yield c


def start(cluster, *options, epochs=12, env=None, example=()):
    """The launcher on the first host, training the example (with the
    options `example` besides the usual); returns (proc, log, release): the
    example trains past `epochs` until finish() creates the file `release`,
    however fast the machine."""
    release = os.path.join(cluster.dir, f"release{next(RUN_NUMBERS)}")
    options = ("--output-filename", release + ".out", *options)  # each rank's lines, for the reports
    if "--blacklist-cooldown-range" not in options:  # a lost host stays out: each test's worlds are known
        options = ("--blacklist-cooldown-range", "inf", "inf", *options)
    argv = [sys.executable, "-m", "mxplugin_run", "--rsh", cluster.rsh, "--network-interface", IFACE, *options,
            sys.executable, EXAMPLE, "--epochs", str(epochs), "--log-steps", "--commit-every", str(COMMIT_EVERY),
            "--min-accuracy", str(MIN_ACCURACY), "--until-exists", release, *example]
    proc, log = cluster.start(0, argv, env=rank_env({**ENV, **PEER_TIMEOUT, **(env or {})}), cwd=REPO)
    return proc, log, release


def finish(proc, log, release, timeout=RUN_TIMEOUT_S):
    """Lets the training end (it has done what the test waited for, or
    failed to) and waits for the launcher; (exit code, output)."""
    open(release, "w").close()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"did not finish within {timeout} s:\n{log.text()[-6000:]}\n{rank_outputs(release)}")
    log.thread.join(timeout=10)
    return proc.returncode, log.text()


def rank_outputs(release, lines=15):
    """The last `lines` of each rank's stdout and stderr in the run of
    `release` (--output-filename): what a lost host's proxy no longer passed on."""
    folder, out = release + ".out", []
    for rank in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        for stream in ("stdout", "stderr"):
            with open(os.path.join(folder, rank, stream), errors="replace") as f:
                tail = f.read().splitlines()[-lines:]
            out.append(f"--- {rank}/{stream}:\n" + "\n".join(tail))
    return "\n".join(out)


def kill_ranks(cluster, *host_indexes):
    """SIGKILLs the training processes (not their agents, nor the
    launcher on the first host) on fake hosts, all found before any dies:
    once one dies the others leave within moments."""
    pids = {i: cluster.pids(i, EXAMPLE, lacks=("mxplugin_run.rank_agent", "-m mxplugin_run")) for i in host_indexes}
    assert all(pids.values()), f"no rank on some host: {pids}"
    for found in pids.values():
        for pid in found:
            os.kill(pid, 9)
    return time.monotonic()


STEP = re.compile(r"^step (\d+): epoch (\d+), (\d+) ranks")
COMMIT = re.compile(r"^commit (\d+): step (\d+)")
RESUMES = re.compile(r"rank (\d+) of (\d+) resumes at step (\d+), weights digest ([-\d.]+), states digest "
                     r"([-\d.]+), (\d+) bytes of optimizer state held")
COMMITTING = re.compile(r"^committing (\d+): states digest ([-\d.]+)")


def steps_at(ranks):
    """A step line of a world of `ranks` ranks."""
    return lambda line: (m := STEP.match(line)) is not None and int(m.group(3)) == ranks


def after(first, then):
    """A predicate for log.wait_for (which reads lines in order): a line
    matching `then` after one matching `first`."""
    seen = []

    def predicate(line):
        if seen:
            return then(line)
        if first(line):
            seen.append(line)
        return False
    return predicate


def commit_line(n):
    return lambda line: (m := COMMIT.match(line)) is not None and int(m.group(1)) >= n


def matches(pattern, lines):
    return [m for m in map(pattern.match, lines) if m]


def steps_lost_at_the_reset(lines, world1, report):
    """Checks that nothing committed is lost: world 1 (from line `world1`
    on) starts from world 0's newest commit; returns the work lost, the
    steps world 0 took after it. Rank 0 prints a commit's line once
    commit() returns, after its host check, a collective that the lost rank
    may never join: so the newest commit is the last one printed or, made
    but not printed, the next one."""
    last = matches(COMMIT, lines[:world1])[-1]
    printed, printed_step = int(last.group(1)), int(last.group(2))
    m = re.search(r"resumes from commit (\d+)", "\n".join(lines[world1:]))
    steps = {int(r.group(3)) for r in map(RESUMES.search, lines[world1:]) if r}
    assert m and len(steps) == 1, report
    commit, step = int(m.group(1)), steps.pop()
    assert (commit, step) == (printed, printed_step) or (commit == printed + 1 and step > printed_step), report
    lost = int(matches(STEP, lines[:world1])[-1].group(1)) - step
    assert 0 <= lost <= COMMIT_EVERY, report
    return lost


def without_steps(text):
    return "\n".join(line for line in text.splitlines() if not STEP.match(line))[-6000:]


def test_a_lost_rank_costs_at_most_the_steps_since_the_last_commit_and_its_host_comes_back(cluster):
    """Rank 2 killed: world 1 goes on at 2 ranks from the last commit, its
    host left out for the cool-down (Note [Cool-downs] in
    mxplugin_run/elastic/cooldown.py); then the host is tried again and world 2
    has 3 ranks. The cool-down (10 s) only needs to outlast the moment
    between the verdict and world 1's choice of hosts (a probe)."""
    proc, log, release = start(cluster, "--min-np", "2", "--max-np", "3", "-H", cluster.host_list((1, 1, 1)),
                               "--blacklist-cooldown-range", "10", "10")
    assert log.wait_for(commit_line(4), 120), log.text()[-4000:]
    killed_at = kill_ranks(cluster, 2)
    resumed = log.wait_for(steps_at(2), HANG_S)
    back = log.wait_for(after(lambda line: "world 2: 3 ranks" in line, steps_at(3)), HANG_S)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}"
    assert code == 0 and resumed and back, report
    lines = text.splitlines()
    world1 = next(i for i, line in enumerate(lines) if "world 1: 2 ranks" in line)
    world2 = next(i for i, line in enumerate(lines) if "world 2: 3 ranks" in line)
    # The survivors left because the launcher told them (at once), not
    # because their collectives timed out.
    assert re.search(r"the launcher says rank 2 on \S+ ended \(signal 9\)", text), report
    lost = steps_lost_at_the_reset(lines[:world2], world1, report)
    host = cluster.hosts[2]
    assert f"left out: {host} for 10 s" in text, report
    assert f"{host}'s cool-down is over (left out after its fault 1: rank 2 was lost there (signal 9))" in text, report
    assert "hosts changed to" in "\n".join(lines[world1:world2]), report  # at a commit, with the state
    assert reached_accuracy(text), report
    print(f"kill to first step at 2 ranks: {resumed[1] - killed_at:.1f} s; steps lost {lost}; "
          f"kill to first step at 3 ranks again: {back[1] - killed_at:.1f} s")


def test_a_lost_host_takes_only_its_rank_the_others_hand_over(cluster):
    """Everything on the third host dies at once (rank, its agent, MPICH's
    proxy), as when a machine fails: mpiexec ends and kills the other
    ranks' process groups, but the ranks outlive that in sessions of their
    own and hand their state over when the launcher tells them."""
    proc, log, release = start(cluster, "--min-np", "2", "--max-np", "3", "-H", cluster.host_list((1, 1, 1)),
                               epochs=10)
    assert log.wait_for(commit_line(4), 120), log.text()[-4000:]
    for pid in cluster.pids(2, ""):
        os.kill(pid, 9)
    # Released at once: with a rank gone, world 0 cannot finish any more.
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}\n{rank_outputs(release)}"
    assert code == 0, report
    assert re.search(rf"lost rank 2 on {cluster.hosts[2]} \(gone without a word: its host was probably lost\)",
                     text), report
    lines = text.splitlines()
    world1 = next(i for i, line in enumerate(lines) if "world 1: 2 ranks" in line)
    steps_lost_at_the_reset(lines, world1, report)
    assert re.search(r"resumes from commit \d+ \(the state handed over", "\n".join(lines[world1:])), report
    assert reached_accuracy(text), report


def test_a_host_found_by_discovery_joins_at_the_next_commit_with_the_state(cluster):
    hosts_file = os.path.join(cluster.dir, "hosts")
    with open(hosts_file, "w") as f:
        f.write(f"{cluster.hosts[0]}:1\n{cluster.hosts[1]}:1\n")
    proc, log, release = start(cluster, "--min-np", "2", "--max-np", "3", "--host-discovery-script",
                               f"cat {hosts_file}", epochs=10)
    assert log.wait_for(commit_line(3), 120), log.text()[-4000:]
    with open(hosts_file, "a") as f:
        f.write(f"{cluster.hosts[2]}:1\n")
    # World 0 trains on, past its epochs if need be, until a commit after
    # the launcher noticed the host; released once the new world trains.
    grown = log.wait_for(steps_at(3), 120)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}"
    assert code == 0 and grown, report
    assert "world 1: 3 ranks" in text, report
    # World 0's ranks left together (Note [Leaving together]): none waited
    # in vain for another, and none crashed as the others left.
    assert "still in this world" not in text and "MPI crashed" not in text, report
    lines = text.splitlines()
    world1 = next(i for i, line in enumerate(lines) if "world 1: 3 ranks" in line)
    # The world ended at a commit: nothing lost, and every rank of the new
    # world, the new one too, starts from that commit's values.
    last_step = int(matches(STEP, lines[:world1])[-1].group(1))
    resumed = [RESUMES.search(line) for line in lines[world1:] if RESUMES.search(line)]
    assert sorted(int(m.group(1)) for m in resumed) == [0, 1, 2], report
    assert {int(m.group(3)) for m in resumed} == {last_step}, report
    assert len({m.group(4) for m in resumed}) == 1, report
    assert any(m.group(3) == "3" for m in matches(STEP, lines[world1:])), report
    assert reached_accuracy(text), report


def one_of_three_killed(cluster, example):
    """The example with `example` options at 3 fake hosts, the third rank
    killed after commit 4; the job must resume at 2 ranks and end well.
    Returns its output (and as lines), the index of world 1's first line,
    the commit world 1 resumed from, and the report for assertions."""
    proc, log, release = start(cluster, "--min-np", "2", "--max-np", "3", "-H", cluster.host_list((1, 1, 1)),
                               example=example)
    assert log.wait_for(commit_line(4), 120), log.text()[-4000:]
    kill_ranks(cluster, 2)
    resumed = log.wait_for(steps_at(2), 120)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}"
    assert code == 0 and resumed, report
    lines = text.splitlines()
    world1 = next(i for i, line in enumerate(lines) if "world 1: 2 ranks" in line)
    steps_lost_at_the_reset(lines, world1, report)
    commit = int(re.search(r"resumes from commit (\d+)", "\n".join(lines[world1:])).group(1))
    return text, lines, world1, commit, report


def test_sharded_optimizer_states_are_resharded_for_the_new_world(cluster):
    """Adam with shard_optimizer_states=True at 3 ranks, one killed: world
    1's two ranks hold the committed states (whole, by their digest) split
    between them, half each, and train on to the accuracy target (Note
    [Elastic sharded states] in mxplugin/elastic/state.py)."""
    text, lines, world1, commit, report = one_of_three_killed(
        cluster, ("--optimizer", "adam", "--base-lr", "0.001", "--shard-optimizer-states"))
    committed = {int(m.group(1)): m.group(2) for m in matches(COMMITTING, lines[:world1])}
    ranks = [m for m in map(RESUMES.search, lines[world1:]) if m]
    assert sorted(int(m.group(1)) for m in ranks) == [0, 1], report
    assert {m.group(5) for m in ranks} == {committed[commit]}, report  # the whole committed states
    held = [int(m.group(6)) for m in ranks]
    hidden = 128  # the example's MLP: 64 -> hidden -> 10; Adam keeps 2 float32 states per weight
    whole = (64 * hidden + hidden + hidden * 10 + 10) * 2 * 4
    assert sum(held) == whole and max(held) <= whole // 2 + 2 * 4 * 4, (held, whole, report)
    assert reached_accuracy(text), report


POWERSGD_PART = re.compile(r"powersgd step (\d+), Q digest ([-\d.]+), errors digest ([-\d.]+)")
POWERSGD_WARMUP = 3


def test_powersgd_state_is_carried_into_the_new_world(cluster):
    """PowerSGD (rank 2, after 3 uncompressed steps) at 3 ranks, one
    killed: world 1's two ranks resume with the committed PowerSGD state
    (its reduction count, its Q factors, and its errors summed over the
    ranks: Note [PowerSGD state across worlds] in mxplugin/training/powersgd.py),
    read back from each of them, and train on, compressed, to the accuracy
    target."""
    text, lines, world1, commit, report = one_of_three_killed(
        cluster, ("--compression", "powersgd", "--powersgd-rank", "2", "--powersgd-warmup", str(POWERSGD_WARMUP)))
    committed = {int(m.group(1)): POWERSGD_PART.search(line) for line in lines[:world1]
                 if (m := COMMITTING.match(line))}
    saved = committed[commit]
    assert saved and int(saved.group(1)) > POWERSGD_WARMUP and float(saved.group(3)) > 0, report
    ranks = [(m, POWERSGD_PART.search(line)) for line in lines[world1:] if (m := RESUMES.search(line))]
    assert sorted(int(m.group(1)) for m, _ in ranks) == [0, 1], report
    for _, held in ranks:  # Q the same on every rank; the errors' sum over the new world's ranks
        assert held and held.group(1) == saved.group(1), report
        for group in (2, 3):
            assert float(held.group(group)) == pytest.approx(float(saved.group(group)), rel=1e-5), report
    # The reduction count goes on from the committed one: at every commit, in
    # both worlds (world 1 commits at least at its epoch's end), it is the step.
    counts = [(i > world1, int(c.group(2)), int(POWERSGD_PART.search(line).group(1))) for i, (line, c) in
              enumerate((line, COMMIT.match(after)) for line, after in zip(lines, lines[1:])) if c
              and COMMITTING.match(line)]
    assert any(new for new, _, _ in counts) and all(step == count for _, step, count in counts), (counts, report)
    assert reached_accuracy(text), report
    print(f"resumed from commit {commit}: {saved.group(0)}; {len(counts)} commits")


def test_the_reset_limit_stops_the_job(cluster):
    proc, log, release = start(cluster, "--min-np", "1", "--max-np", "3", "--reset-limit", "1", "-H",
                               cluster.host_list((1, 1, 1)))
    assert log.wait_for(commit_line(3), 120), log.text()[-4000:]
    kill_ranks(cluster, 2)
    assert log.wait_for(steps_at(2), 120), log.text()
    kill_ranks(cluster, 1)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}"
    assert code == 1, report
    assert re.search(r"stopping: world 1: lost rank 1 on \S+ \(signal 9\).*reset 2, over --reset-limit 1", text), report


def test_every_rank_lost_resumes_from_the_checkpoint(cluster):
    checkpoint = os.path.join(cluster.dir, "state.ckpt")
    proc, log, release = start(cluster, "--min-np", "3", "--max-np", "3", "--checkpoint-path", checkpoint, "-H",
                               cluster.host_list((1, 1, 1)), epochs=10)
    assert log.wait_for(commit_line(4), 120), log.text()[-4000:]
    kill_ranks(cluster, 0, 1, 2)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{without_steps(text)}"
    assert code == 0, report
    assert "every rank was lost; resuming from the newest committed state" in text, report
    m = re.search(r"resumes from commit (\d+) \(checkpoint ", text)
    assert m and int(m.group(1)) >= 4, report
    assert reached_accuracy(text), report


def test_every_rank_lost_without_a_checkpoint_stops_the_job(cluster):
    proc, log, release = start(cluster, "--min-np", "2", "--max-np", "2", "-H", cluster.host_list((1, 1)))
    assert log.wait_for(commit_line(2), 120), log.text()[-4000:]
    kill_ranks(cluster, 0, 1)
    code, text = finish(proc, log, release)
    report = f"exit {code}\n{text[-4000:]}"
    assert code == 1, report
    assert "every rank was lost and there is no committed state to resume from" in text, report


def test_min_np_out_of_reach_fails_after_the_timeout(cluster):
    t0 = time.monotonic()
    proc, log, release = start(cluster, "--min-np", "3", "-H", cluster.host_list((1, 1)), "--elastic-timeout", "3")
    code, text = finish(proc, log, release, timeout=60)
    took = time.monotonic() - t0
    assert code == 1, text
    assert "--min-np 3 not reached within --elastic-timeout 3 s: 2 slots usable" in text, text
    assert took < HANG_S, f"took {took:.1f} s"  # Note [Hang limits]
