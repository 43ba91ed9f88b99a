"""What must hold after a chaos run (tests/chaos.py), each check returning
the problems it found (strings; none when it holds) and, where it measures
something, what it measured."""
import os
import signal
import subprocess
import time

from chaos_log import (FINAL, RANK_RESUMES, RESUMED_FROM, STEP, commit_steps, newest_commits,
                       worlds)
from rank_processes import SHM_DIR

# How long what the job started may take to end once the launcher has
# exited: a rank cut off from the launcher ends by itself within
# LAUNCHER_GONE_S (20 s) of its last answer, and a socket left closing
# (FIN-WAIT, LAST-ACK) goes within the kernel's own timeouts.
LEFTOVERS_WAIT_S = 60
# Socket states that are the kernel's to end, not a process's.
CLOSING_STATES = ("TIME-WAIT",)


def resumes(lines):
    """Note [Resumes in a chaos run]: every world after the first that
    trained must start from the newest commit: the last one rank 0 printed
    as made, or the next one. Rank 0 prints a commit as made only after its
    host check, a collective that a lost rank may never join, so the
    survivors may hold the next one made though unprinted; and when rank 0
    itself is lost as a commit is made, the survivors may make one it never
    began, at most one step past the last step it printed (that step's
    collectives completed on every rank), or at that step (an epoch's end
    commits again after the evaluation). Never an older commit (a lost
    one), never a newer one or another step (a stale or made-up state).
    Every rank of the world resumes at that step, and its first step is
    the next one. A world that never trained (a rank killed as it started)
    is only noted, as is one before any commit was made (it starts afresh).

    Returns (problems, [{world, commit, step, steps_lost, trained}, or
    {world, trained} for a world that resumed from no commit])."""
    problems, found = [], []
    for world in worlds(lines)[1:]:
        segment = [text for _, text in lines[world.index:world.end]]
        said = [m for m in map(RESUMED_FROM.search, segment) if m and int(m.group(1)) == world.number]
        prior = lines[:world.index]
        printed, begun = newest_commits(prior)
        if not said:
            if world.first_step is not None and (printed, begun) != (-1, -1):
                problems.append(f"world {world.number} trained without resuming from a commit")
            found.append({"world": world.number, "trained": world.first_step is not None})
            continue
        commit = int(said[0].group(3))
        rank_steps = {int(m.group(3)) for m in map(RANK_RESUMES.search, segment) if m}
        step = rank_steps.pop() if len(rank_steps) == 1 else None
        last_step = max((int(m.group(1)) for m in (STEP.match(t) for _, t in prior) if m), default=0)
        problem = _resume_problem(commit, step, printed, begun, commit_steps(prior), last_step)
        if problem:
            problems.append(f"world {world.number} resumed from commit {commit} at step(s) "
                            f"{step if step is not None else sorted(rank_steps)}: {problem}")
        elif world.first_step is not None and world.first_step[2] != step + 1:
            problems.append(f"world {world.number}: first step {world.first_step[2]} after resuming at step {step}")
        found.append({"world": world.number, "commit": commit, "step": step,
                      "steps_lost": None if step is None else last_step - step, "trained": world.first_step is not None})
    return problems, found


def _resume_problem(commit, step, printed, begun, steps, last_step):
    """What is wrong with resuming from `commit` at `step` (Note [Resumes in
    a chaos run]), or None."""
    if step is None:
        return "its ranks do not agree on the step"
    if commit == printed or (commit == begun == printed + 1):
        return None if step == steps.get(commit) else f"commit {commit} was made at step {steps.get(commit)}"
    # Made by the survivors as rank 0 was lost, before it said so; at the
    # same step as the one before when it is an epoch's end.
    if commit == printed + 1 and begun == printed and steps.get(printed, 0) <= step <= last_step + 1:
        return None
    return f"the newest commit before it was {printed} (begun: {begun}), at step {steps.get(printed)}"


def final_accuracy(lines, target):
    """(problems, the final test accuracy or None)."""
    said = [float(m.group(1)) for m in (FINAL.search(t) for _, t in lines) if m]
    if not said:
        return ["no final test accuracy"], None
    return ([] if said[-1] >= target else [f"final test accuracy {said[-1]} below {target}"]), said[-1]


def rank_ends(ranks, injected):
    """Every rank process ended, and none by a signal it was not sent
    (`injected`: {pid: [signal numbers sent]}). Returns (problems, {how:
    count})."""
    problems, counts = [], {}
    for rank in ranks:
        how = rank.how or "still running"
        counts[how] = counts.get(how, 0) + 1
        if rank.how is None:
            problems.append(f"rank process {rank.pid} on host {rank.host} is still running")
        elif how.startswith("signal ") and int(how.split()[1]) not in injected.get(rank.pid, ()):
            name = signal.Signals(int(how.split()[1])).name
            problems.append(f"rank process {rank.pid} on host {rank.host} ended by {name}, which it was not sent")
    return problems, counts


def _sockets(namespace):
    """The TCP and UDP sockets of a namespace not left to the kernel to close."""
    out = subprocess.run(["ip", "netns", "exec", namespace, "ss", "-Htuan"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split() and line.split()[1] not in CLOSING_STATES]


def job_segments(ranks, killed_with_host):
    """(names of the /dev/shm segments `ranks` mapped, those of them mapped
    by ranks killed with their whole host). A real host's memory goes with
    it; the fake hosts share this machine's /dev/shm, so what such a rank
    leaves there is no leak of the job's (the run removes it)."""
    every = set().union(*(r.segments for r in ranks))
    lost_with_host = set().union(*(r.segments for r in ranks if r.pid in killed_with_host))
    return every, lost_with_host


def nothing_running(cluster):
    """Waits up to LEFTOVERS_WAIT_S for the cluster's namespaces to hold no
    process and no socket but closing ones. Returns (problems, seconds
    waited)."""
    start = time.monotonic()
    while True:
        processes = {ns: cluster.pids(i, "") for i, ns in enumerate(cluster.hosts)}
        sockets = {ns: _sockets(ns) for ns in cluster.hosts}
        if not any(processes.values()) and not any(sockets.values()):
            break
        if time.monotonic() - start > LEFTOVERS_WAIT_S:
            break
        time.sleep(0.5)
    problems = [f"{ns}: processes still running {LEFTOVERS_WAIT_S} s after the launcher: {pids}: "
                + "; ".join(where_stuck(pid) for pid in pids)
                for ns, pids in processes.items() if pids]
    problems += [f"{ns}: sockets left: {'; '.join(' '.join(s.split()) for s in left)}"
                 for ns, left in sockets.items() if left]
    return problems, time.monotonic() - start


def where_stuck(pid):
    """What a process left running is doing: its command, and each
    thread's name and kernel wait, and its native stack where gdb is there
    (the report of a failed run is all there is to go on afterwards)."""
    def read(path):
        try:
            with open(path) as f:
                return f.read().replace("\0", " ").strip()
        except OSError:
            return "?"
    threads = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task")) if os.path.isdir(f"/proc/{pid}/task") else []:
        threads.append(f"{read(f'/proc/{pid}/task/{tid}/comm')}:{read(f'/proc/{pid}/task/{tid}/wchan')}")
    text = f"pid {pid} ({read(f'/proc/{pid}/cmdline')[:160]}) threads [{', '.join(threads)}]"
    try:
        done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 12"],
                              capture_output=True, text=True, timeout=30)
        frames = [line for line in done.stdout.splitlines() if line.startswith(("Thread ", "#"))]
        text += " stacks: " + " | ".join(frames)[:6000]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return text


def segments_left(names):
    """Problems: the shared-memory segments `names` (in /dev/shm) still there."""
    kept = sorted(name for name in names if os.path.exists(SHM_DIR + name))
    return [f"shared-memory segments of the job left in {SHM_DIR}: {', '.join(kept)}"] if kept else []


def remove_segments(names):
    """Removes what is left of the job's segments `names` (the run's own
    clean-up, after the checks); returns how many there were."""
    removed = 0
    for name in names:
        try:
            os.unlink(SHM_DIR + name)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
