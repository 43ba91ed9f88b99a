"""What must hold after a chaos run (tests/chaos.py), each check returning
the problems it found (strings; none when it holds) and, where it measures
something, what it measured."""
import os
import re
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


# A rank's end as the launcher says it with --verbose (Job's say_ends in
# mxplugin_run/job.py): its agent's record, the phase among it.
END_SAID = re.compile(r"^mxplugin-run: rank \S+ \(pid (\d+) on \S+\) ended: [^,]+, phase (\w+)")


def phases_of(lines):
    """{pid: the phase its agent last heard of} from the launcher's `lines` ([(time, text)])."""
    return {int(m.group(1)): m.group(2) for m in (END_SAID.match(t) for _, t in lines) if m}


def rank_ends(ranks, injected, phases=None):
    """Every rank process ended, none by a signal it was not sent
    (`injected`: {pid: [signal numbers sent]}) and none with an exit code
    that no part of the job documents (Note [Rank ends]; `phases`: {pid:
    its last phase}). Returns (problems, {how: count})."""
    problems, counts = [], {}
    phases = phases or {}
    for rank in ranks:
        how = rank.how or "still running"
        counts[how] = counts.get(how, 0) + 1
        cause, why = explain_end(rank.how, injected.get(rank.pid, ()), None, killed_peer(rank, ranks, injected),
                                 left_peer(rank, ranks), phases.get(rank.pid))
        if cause == UNEXPLAINED:
            problems.append(f"rank process {rank.pid} on host {rank.host} (world {getattr(rank, 'world', '?')}, "
                            f"rank {getattr(rank, 'rank', '?')}): {why}")
    return problems, counts


# Note [Rank ends]: how each rank process of a chaos run ended, read as
# one of: a clean exit (code 0: the training function returned), the
# elastic exit (code 75, EXIT_RESET: a rank leaving its world for the
# next, whatever ended the world, with its line in the output), a crash
# while leaving (a crash signal, MXNet's exit 255 or code 78 in the phase
# leaving, as the rank's agent recorded it: MPICH crashed under a rank
# that had decided to leave; counted apart, as it is a crash however it is
# explained), a crash in MPI's start (the same in the phase starting: its
# world torn down under it; apart too), a crash under a running world (code 78, EXIT_WORLD_CRASHED, within
# COLLATERAL_S of the run's kill of a peer of its world: MPICH crashed under
# the core's thread as it worked against the killed peer, Note [Crashes
# under a running world]; or as a peer left it, its world ended (Note
# [One rule for a world's end]); or of a rank the run froze, as it was let go:
# its core's thread was stopped inside an MPI call, Note [A rank that was
# stopped], and resumed there against peers gone; the rank's line and its
# thread's stack are in the output where its proxy still is; apart too), a
# collateral crash (the same as a crash signal, or MXNet's exit 255, where
# the rank ran with MXPLUGIN_CRASH_EXIT=0), a signal
# the run sent (its fault's kind named), or unexplained: anything else (an
# exit code no part of the job documents, a signal nobody sent, still
# running), kept with the evidence: what the job's output says of that
# rank, the lines around its end and, where bench/chaos_loop.py caught its
# core dump, its threads' native stacks. Every end must be explained.
CLEAN, ELASTIC, INJECTED, UNEXPLAINED = "clean exit", "elastic exit", "injected signal", "unexplained"
CRASHED_LEAVING, CRASHED_STARTING = "crash while leaving", "crash in MPI's start"
COLLATERAL, CRASHED_UNDER_WORLD = "collateral crash", "crash under a running world"
# A crash of a rank counts as collateral when a peer of its world was
# killed by the run this long before it (Note [One rule for a world's end] in
# mxplugin_run/elastic/rank_ends.py: MPICH crashed under the core's thread
# 0.03-0.4 s after a peer's SIGKILL, before the launcher's word came).
COLLATERAL_S = 2.0
CRASH_ENDS = ("signal 11", "signal 6", "signal 7", "signal 4", "signal 8", "code 255")
# mxplugin_run.protocol's; not imported, which would load MXNet into the driver
EXIT_RESET, EXIT_WORLD_CRASHED = 75, 78
# The lines kept as evidence: from this long before a rank's end to this
# long after (its last words, MPICH's or the launcher's on it), at most
# EVIDENCE_LINES of them, and as many naming it.
EVIDENCE_BEFORE_S, EVIDENCE_AFTER_S, EVIDENCE_LINES = 2.0, 0.5, 20


def rank_records(ranks, injected, faults, killed_with_host, lines, start, phases=None):
    """One record per rank process (Note [Rank ends]): pid, host, world,
    rank, how it ended, when (seconds from monotonic time `start`), its
    cause and why, and for an unexplained end the evidence from `lines`
    ([(time, text)])."""
    fault_of = {f["pid"]: f["kind"] for f in faults if "pid" in f}
    fault_of.update((pid, "kill_host") for pid in killed_with_host)
    records = []
    phases = phases_of(lines) if phases is None else phases
    for rank in ranks:
        cause, why = explain_end(rank.how, injected.get(rank.pid, ()), fault_of.get(rank.pid),
                                 killed_peer(rank, ranks, injected), left_peer(rank, ranks), phases.get(rank.pid))
        record = {"pid": rank.pid, "host": rank.host, "world": getattr(rank, "world", None),
                  "rank": getattr(rank, "rank", None), "how": rank.how or "still running",
                  "started_s": round(rank.started - start, 2),
                  "ended_s": None if rank.ended is None else round(rank.ended - start, 2),
                  "phase": phases.get(rank.pid), "cause": cause, "why": why}
        if cause == UNEXPLAINED:
            record["evidence"] = evidence(rank, lines, start)
        records.append(record)
    return records


def killed_peer(rank, ranks, injected):
    """A peer of `rank`'s world that the run killed at most COLLATERAL_S
    before `rank` ended (a rank process record), or None."""
    return _peer_ended_just_before(rank, ranks, lambda peer: peer.pid in injected)


def left_peer(rank, ranks):
    """A peer of `rank`'s world that left it with the elastic exit code at
    most COLLATERAL_S before `rank` ended, or None."""
    return _peer_ended_just_before(rank, ranks, lambda peer: peer.how == f"code {EXIT_RESET}")


def _peer_ended_just_before(rank, ranks, chosen):
    """The first peer of `rank`'s world for which `chosen` holds that ended
    at most COLLATERAL_S before `rank`, or None."""
    if rank.ended is None or getattr(rank, "world", None) is None:
        return None
    for peer in ranks:
        if (peer is not rank and chosen(peer) and getattr(peer, "world", None) == rank.world
                and peer.ended is not None and 0 <= rank.ended - peer.ended <= COLLATERAL_S):
            return peer
    return None


def explain_end(how, sent, fault, killed=None, left=None, phase=None):
    """(cause, why) of a rank end `how` ("code N", "signal N", None while it
    runs), given the signals the run sent it, its fault's kind, a peer of
    its world the run killed just before (killed_peer), one that left its
    world just before (left_peer) and the phase its agent recorded."""
    if how is None:
        return UNEXPLAINED, "still running when the run ended"
    kind, number = how.split()
    number = int(number)
    if kind == "code" and number == 0:
        return CLEAN, "its training function returned"
    if kind == "code" and number == EXIT_RESET:
        return ELASTIC, "left its world for the next (EXIT_RESET)"
    crashed = how in CRASH_ENDS or how == f"code {EXIT_WORLD_CRASHED}"
    if crashed and phase == "leaving":
        return CRASHED_LEAVING, f"{how}: MPI crashed under it as it left its world (phase leaving)"
    if crashed and phase == "starting":
        return CRASHED_STARTING, f"{how}: MPI's start crashed under it as its world was torn down (phase starting)"
    if kind == "code" and number == EXIT_WORLD_CRASHED and signal.SIGCONT in sent:
        return CRASHED_UNDER_WORLD, ("MPI crashed under its core's thread as the run let it go (SIGCONT): its world "
                                     "had ended while it was stopped inside an MPI call (Note [A rank that was "
                                     "stopped]) (EXIT_WORLD_CRASHED)")
    if kind == "code" and number == EXIT_WORLD_CRASHED and left is not None:
        return CRASHED_UNDER_WORLD, (f"MPI crashed under its core's thread as rank process {left.pid} of its world "
                                     "left it (EXIT_WORLD_CRASHED; Note [One rule for a world's end])")
    if kind == "code" and number == EXIT_WORLD_CRASHED and killed is not None:
        return CRASHED_UNDER_WORLD, (f"MPI crashed under its core's thread after the run killed rank process "
                                     f"{killed.pid} of its world (EXIT_WORLD_CRASHED)")
    if kind == "signal" and number in sent:
        return INJECTED, f"{signal.Signals(number).name} sent by the run ({fault or 'a fault'})"
    if how in CRASH_ENDS and killed is not None:
        return COLLATERAL, (f"{how}: MPI crashed under it after the run killed rank process "
                            f"{killed.pid} of its world (Note [One rule for a world's end])")
    if kind == "signal":
        return UNEXPLAINED, f"{signal.Signals(number).name}, which the run did not send"
    return UNEXPLAINED, f"exit code {number}, which no part of the job documents"


def evidence(rank, lines, start):
    """What `lines` say of `rank`: the lines of its lifetime that name it
    (its own "rank R:" lines, the launcher's on rank R of its world) and
    those around its end."""
    world, number = getattr(rank, "world", None), getattr(rank, "rank", None)
    end = rank.ended if rank.ended is not None else (lines[-1][0] if lines else rank.started)
    own = re.compile(rf"\brank {number}\b") if number is not None else None
    of_world = f"world {world}:"

    def names_it(text):
        return own is not None and own.search(text) is not None and (
            not text.startswith("mxplugin-run:") or of_world in text)
    named = [f"{when - start:8.2f} {text}" for when, text in lines
             if rank.started <= when <= end + EVIDENCE_AFTER_S and names_it(text)]
    near = [f"{when - end:+.2f} {text}" for when, text in lines
            if -EVIDENCE_BEFORE_S <= when - end <= EVIDENCE_AFTER_S]
    return {"lines_naming_it": named[-EVIDENCE_LINES:], "lines_near_its_end": near[-EVIDENCE_LINES:]}


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
