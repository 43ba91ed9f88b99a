"""Kills a rank at a random moment of a collective, again and again, and
records how each survivor ended (tests/spmd/kill_target.py runs the
collectives): with the clear error ("clear"), by a signal ("signal 11"),
with another error ("unclear"), with wrong numbers ("wrong"), or not at
all ("hang", after HANG_S). Used by tests/test_reliability.py (a few kills)
and as a soak: python tests/kill_loop.py --kills 100 [--seed S] [--out FILE]."""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mpi_harness import HANG_S, REPO, SPMD_DIR, mpiexec_path, rank_env  # noqa: E402

# What the elastic launcher sets for its ranks, whose survivors live on as
# here (Note [Single copy in elastic jobs]).
from mxplugin_run.protocol import SURVIVOR_MPI_ENV  # noqa: E402

KINDS = ("allreduce", "grouped", "allgather", "broadcast", "reducescatter")
# The shared-memory path (ranks of one host) and the MPI path.
PATHS = {"shared memory": {}, "MPI": {"MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"}}
RANKS = 3
# How a survivor may end: the clear error raised, or said by the watchdog.
CLEAN = {"clear", "clear, ended by the watchdog"}
PEER_TIMEOUT_S = "5"


class Lines(threading.Thread):
    """Collects a process's output lines; wait_for() blocks until a
    predicate holds over them."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.lines, self.cond = stream, [], threading.Condition()
        self.closed = False

    def run(self):
        for line in self.stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.lines) or self.closed, timeout) and predicate(self.lines)


def kill_once(kind, path, victim, offset_s, seed):
    """One job of RANKS ranks running `kind`; `victim` SIGKILLed `offset_s`
    after every rank's first call worked. Returns {"survivors": {rank:
    outcome}, "calls": ..., ...}."""
    env = rank_env({"MXPLUGIN_PEER_TIMEOUT_SECONDS": PEER_TIMEOUT_S, **SURVIVOR_MPI_ENV, **PATHS[path]})
    cmd = [mpiexec_path(), "-n", str(RANKS), "-disable-auto-cleanup", sys.executable,
           os.path.join(SPMD_DIR, "kill_target.py"), kind, str(seed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    out = Lines(proc.stdout)
    out.start()
    record = {"kind": kind, "path": path, "victim": victim, "offset_s": round(offset_s, 4), "seed": seed}
    try:
        ready = out.wait_for(lambda lines: sum(line.startswith("READY ") for line in lines) == RANKS, HANG_S)
        if not ready:
            record["error"] = "the ranks did not start"
            return record
        pid = next(int(line.split()[2]) for line in out.lines if line.startswith(f"PID {victim} "))
        time.sleep(offset_s)  # a random point of the loop: where the kill lands is what is tried
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=HANG_S)
        record["end_s"] = round(time.monotonic() - killed, 2)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # only what this call started: its own session
            proc.wait()
        out.join(timeout=HANG_S)
    record["survivors"] = {r: outcome(out.lines, r) for r in range(RANKS) if r != victim}
    record["output"] = [line for line in out.lines if not line.startswith(("READY", "PID"))][-20:]
    return record


def outcome(lines, rank):
    status = next((line.split(None, 2)[2] for line in lines if line.startswith(f"STATUS {rank} ")), None)
    if any(line.startswith(f"WRONG {rank} ") for line in lines):
        return "wrong"
    if status is None:
        return "hang"
    if status.startswith("signal"):
        return status
    if any(line.startswith(f"CLEAR {rank} ") for line in lines) and status == "exit 0":
        return "clear"
    # Stuck in a transfer inside MPI, which cannot be abandoned: the
    # watchdog says why and ends the process (Note [Stuck transfers]).
    if status == "exit 1" and any(_STUCK.match(line) and line.startswith(f"mxplugin: rank {rank}: ")
                                  for line in lines):
        return "clear, ended by the watchdog"
    return "unclear"


_STUCK = re.compile(r"^mxplugin: rank \d+: mxplugin lost contact with its peers: .*(cannot be reached|ended)")


def plan(kills, seed):
    """The kills to try: every kind on both paths in turn, each with a
    random victim (rank 0, the coordinator, too) and offset."""
    rng = random.Random(seed)
    combos = [(k, p) for k in KINDS for p in PATHS]
    return [(*combos[i % len(combos)], rng.randrange(RANKS), rng.uniform(0, 0.5), rng.randrange(1 << 20))
            for i in range(kills)]


def summary(records):
    counts = {}
    for rec in records:
        for how in rec.get("survivors", {}).values():
            counts[how] = counts.get(how, 0) + 1
        if "error" in rec:
            counts["not started"] = counts.get("not started", 0) + 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    parser.add_argument("--out", help="write every kill's record here (JSON)")
    args = parser.parse_args()
    print(f"kill loop: seed {args.seed}, {args.kills} kills", flush=True)
    records = []
    for i, (kind, path, victim, offset, seed) in enumerate(plan(args.kills, args.seed)):
        rec = kill_once(kind, path, victim, offset, seed)
        records.append(rec)
        print(f"{i + 1}/{args.kills}: {kind} on {path}, rank {victim} killed {offset * 1000:.0f} ms in: "
              f"{rec.get('error') or rec['survivors']}", flush=True)
        if args.out:  # after every kill: a long soak stopped early still has its figures
            with open(args.out, "w") as f:
                json.dump({"seed": args.seed, "planned": args.kills, "survivor_mpi_env": SURVIVOR_MPI_ENV,
                           "kills": records, "survivors": summary(records)}, f, indent=1)
    counts = summary(records)
    print(f"kill loop: {len(records)} kills, survivors ended: {counts}", flush=True)
    sys.exit(0 if set(counts) <= CLEAN else 1)


if __name__ == "__main__":
    main()
