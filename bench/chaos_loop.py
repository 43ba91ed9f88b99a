"""Chaos runs in a loop (tests/chaos.py), every rank end explained (issue 48):
N runs, each with its own seed, and for each rank process of each run how
it ended and why (Note [Rank ends] in tests/chaos_checks.py): a clean exit,
the elastic exit code, a signal the run sent, or unexplained, with the
evidence: the job's lines on that rank and around its end, and the native
stacks of its threads where it dumped core. Written to
bench/results/chaos_loop.json with the machine's facts. Needs root (fake
hosts, the kernel's process events, the kernel's core pattern).

    python bench/chaos_loop.py --runs 5                    # one fault of each kind a run, seeds from a random first one
    python bench/chaos_loop.py --runs 10 --seed 100 --more kill_in_reset=3

Note [Catching a rank's crash]: a rank that crashes leaves nothing behind
by default: MXNet 1.9.1 installs a SIGSEGV handler (when none is there)
that prints "Segmentation fault: 11" and calls exit(-1), so the kernel
reports exit code 255, or SIGABRT when exit's clean-up runs into the
threads still running; and what it prints is lost when MPICH's proxy, its
stderr, is gone. So for the loop's runs: PYTHONFAULTHANDLER=1 in the job's
environment (Python's handler, installed first, keeps MXNet from
installing its own; it writes every thread's Python stack and re-raises
the signal), core dumps unlimited (RLIMIT_CORE, inherited by the ranks)
and the kernel's core pattern pointed at the loop's directory for the
loop's time (put back after: it is the machine's); each rank's core is
read with gdb ("thread apply all bt") and removed (--keep-cores keeps
them). A crash is then the signal itself (signal 11), never exit 255.

Exits 1 when a rank end was unexplained or a run found a problem."""
import glob
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time

from harness import REPO, arguments, write_result

sys.path.insert(0, os.path.join(REPO, "tests"))  # `chaos` is tests/chaos.py
import chaos  # noqa: E402
from chaos_checks import UNEXPLAINED  # noqa: E402

NAME = "chaos_loop.json"
CORE_PATTERN = "/proc/sys/kernel/core_pattern"
# Frames kept per thread of a core's stacks (the crashing thread's in full).
FRAMES_PER_THREAD = 12
GDB_TIMEOUT_S = 300
PYTHON = sys.executable


def main():
    parser = arguments(__doc__, output=NAME)
    parser.add_argument("--runs", type=int, default=5, help="chaos runs, each with its own seed (default 5)")
    parser.add_argument("--faults", type=int, default=len(chaos.KINDS),
                        help=f"faults per run (default {len(chaos.KINDS)}: one of each kind)")
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30),
                        help="the first run's seed; the next runs take the next numbers (default: random)")
    parser.add_argument("--more", action="append", default=[], metavar="KIND=WEIGHT",
                        help="faults past one of each kind drawn WEIGHT times likelier of KIND (repeatable), e.g. "
                             "kill_in_reset=3 for more worlds ended as they start")
    parser.add_argument("--peer-timeout", type=int, default=chaos.PEER_TIMEOUT_S,
                        help=f"the ranks' MXPLUGIN_PEER_TIMEOUT_SECONDS (default {chaos.PEER_TIMEOUT_S})")
    parser.add_argument("--work", help="where the runs' logs and cores go (default: a new folder in /tmp)")
    parser.add_argument("--keep-cores", action="store_true", help="keep the core files after reading them")
    parser.add_argument("--crashes-stay", action="store_true",
                        help="MXPLUGIN_CRASH_EXIT=0: MPI crashing under a rank's core thread stays a crash "
                             "(with its core) instead of code 78 and one line")
    args = parser.parse_args()
    why = chaos.unavailable()
    if why:
        raise SystemExit(f"chaos loop: cannot run here: {why}")
    work = args.work or tempfile.mkdtemp(prefix="chaos_loop-")
    os.makedirs(work, exist_ok=True)
    pool = fault_pool(args.more)
    settings = {"runs": args.runs, "faults": args.faults, "first_seed": args.seed, "pool": pool,
                "peer_timeout_s": args.peer_timeout, "crash_capture": "PYTHONFAULTHANDLER=1, core dumps, gdb"
                + (", MXPLUGIN_CRASH_EXIT=0" if args.crashes_stay else "")}
    runs = []
    with crash_capture(work, args.crashes_stay):
        for i in range(args.runs):
            runs.append(one_run(args.seed + i, args, pool, work))
            write_result(args.output, summarise(settings, runs))  # as it goes: a loop may be stopped
    result = summarise(settings, runs)
    print(report(result), flush=True)
    print(f"logs in {work}", flush=True)
    sys.exit(1 if result["unexplained"] or any(r["problems"] for r in runs) else 0)


def fault_pool(more):
    """The kinds drawn from past one of each (tests/chaos.py schedule):
    every kind once, KIND WEIGHT times for each --more KIND=WEIGHT."""
    weights = {kind: 1 for kind in chaos.KINDS}
    for item in more:
        kind, _, weight = item.partition("=")
        if kind not in weights:
            raise SystemExit(f"chaos loop: no fault kind {kind!r} (kinds: {', '.join(chaos.KINDS)})")
        weights[kind] = int(weight or 2)
    return [kind for kind, weight in weights.items() for _ in range(weight)]


class crash_capture:
    """Note [Catching a rank's crash]: for the block, the job's ranks dump
    core into `work` and run Python's fault handler."""

    def __init__(self, work, crashes_stay=False):
        self.work = work
        self.crashes_stay = crashes_stay

    def __enter__(self):
        with open(CORE_PATTERN) as f:
            self.pattern = f.read()
        self.limit = resource.getrlimit(resource.RLIMIT_CORE)
        self.handler = os.environ.get("PYTHONFAULTHANDLER")
        # %p: the pid the process events name; the whole path, as the ranks
        # run in other network (not mount) namespaces with other cwds.
        with open(CORE_PATTERN, "w") as f:
            f.write(os.path.join(self.work, "core.%p"))
        resource.setrlimit(resource.RLIMIT_CORE, (self.limit[1], self.limit[1]))
        os.environ["PYTHONFAULTHANDLER"] = "1"  # the job's environment is this process's (mpi_harness.rank_env)
        if self.crashes_stay:
            os.environ["MXPLUGIN_CRASH_EXIT"] = "0"
        return self

    def __exit__(self, *exc):
        with open(CORE_PATTERN, "w") as f:
            f.write(self.pattern)
        resource.setrlimit(resource.RLIMIT_CORE, self.limit)
        if self.handler is None:
            os.environ.pop("PYTHONFAULTHANDLER", None)
        else:
            os.environ["PYTHONFAULTHANDLER"] = self.handler
        if self.crashes_stay:
            os.environ.pop("MXPLUGIN_CRASH_EXIT", None)


def one_run(seed, args, pool, work):
    """One chaos run's record, its ranks' crashes read from their cores."""
    log = os.path.join(work, f"chaos-{seed}.log")
    try:
        record = chaos.run_chaos(args.faults, seed, args.peer_timeout, say=lambda t: print(t, flush=True),
                                 log_path=log, pool=pool)
    except Exception as exc:  # noqa: BLE001 - one broken run must not end the loop; it is recorded
        return {"seed": seed, "error": f"{type(exc).__name__}: {exc}", "problems": [str(exc)], "ranks": [],
                "log": log}
    for rank in record["ranks"]:
        core = os.path.join(work, f"core.{rank['pid']}")
        if os.path.exists(core):
            rank["backtrace"] = backtrace(core)
            if rank["cause"] != UNEXPLAINED:  # a crash is never explained by its exit alone
                rank["cause"], rank["why"] = UNEXPLAINED, rank["why"] + ", and dumped core"
            if not args.keep_cores and "error" not in rank["backtrace"]:
                os.unlink(core)
    kept = {k: record[k] for k in ("seed", "duration_s", "resets", "final_accuracy", "problems", "rank_ends")}
    kept["rank_causes"] = chaos.tally(r["cause"] for r in record["ranks"])  # with the cores' word
    # Whole, not their kinds only: which pid a fault hit, when, and how a
    # frozen rank left are what an unexplained end is read against.
    kept["faults"] = record["faults"]
    kept["ranks"] = record["ranks"]
    kept["other_cores"] = other_cores(work, args.keep_cores)
    kept["log"] = log
    kept["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return kept


def other_cores(work, keep):
    """Cores in `work` that no rank of the run left (mpiexec, a proxy, the
    agent): their command line and crashing thread's stack."""
    found = []
    for core in sorted(glob.glob(os.path.join(work, "core.*"))):
        found.append({"core": os.path.basename(core), **backtrace(core)})
        if not keep and "error" not in found[-1]:
            os.unlink(core)
    return found


def backtrace(core):
    """What gdb reads in `core`: the program, the signal, and the native
    stacks of its threads (the one that got the signal first and whole;
    the others' top frames), frames of stripped libraries as LIB+OFFSET."""
    program = _program_of(core)
    try:
        out = subprocess.run(["gdb", "-batch", "-nx", "-ex", "info sharedlibrary", "-ex", "thread apply all bt 60",
                              program, core], capture_output=True, text=True, timeout=GDB_TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"program": program, "error": f"gdb: {exc}"}
    bases = _library_bases(out)
    signal_line = next((line for line in out.splitlines() if line.startswith("Program terminated")), "")
    threads = _threads(out, bases)
    current = re.search(r"^\[Current thread is \d+ \(.*?(\(LWP \d+\))", out, re.M)  # the one the signal hit
    crashed = next((t for t in threads if current and current.group(1) in t["thread"]), None)
    others = [t for t in threads if t is not crashed]
    return {"program": program, "signal": signal_line,
            "crashed_thread": crashed,
            "other_threads": [{"thread": t["thread"], "frames": t["frames"][:FRAMES_PER_THREAD]} for t in others]}


def _program_of(core):
    """The executable a core is of (a rank's Python), from `file`."""
    out = subprocess.run(["file", core], capture_output=True, text=True).stdout
    m = re.search(r"execfn: '([^']+)'", out)
    return m.group(1) if m and os.path.exists(m.group(1)) else PYTHON


def _library_bases(gdb_out):
    """{library path: its load address} from `info sharedlibrary`, by its
    .text start and the file's .text address (readelf)."""
    bases = {}
    for m in re.finditer(r"^(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+\S+(?: \(\*\))?\s+(/\S+)$", gdb_out, re.M):
        text = _text_address(m.group(2))
        if text is not None:
            bases[m.group(2)] = int(m.group(1), 16) - text
    return bases


def _text_address(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
    m = re.search(r"\.text\s+PROGBITS\s+([0-9a-f]+)", out)
    return int(m.group(1), 16) if m else None


def _threads(gdb_out, bases):
    """[{thread, frames}] of `thread apply all bt`, in gdb's order."""
    threads = []
    for line in gdb_out.splitlines():
        if line.startswith("Thread "):
            threads.append({"thread": line.rstrip(":"), "frames": []})
        elif line.startswith("#") and threads:
            threads[-1]["frames"].append(_frame(line, bases))
    return threads


def _frame(line, bases):
    """A frame line, shortened; `?? () from LIB` as LIB+OFFSET."""
    m = re.match(r"#(\d+)\s+(0x[0-9a-f]+) in \?\? \(\) from (\S+)", line)
    if m and m.group(3) in bases:
        return f"#{m.group(1)} {os.path.basename(m.group(3))}+{int(m.group(2), 16) - bases[m.group(3)]:#x}"
    line = re.sub(r"^(#\d+)\s+0x[0-9a-f]+ in ", r"\1 ", line)
    return re.sub(r" \(.*?\) (at|from) ", r" \1 ", line)[:300]


def summarise(settings, runs):
    """The loop's record: its settings, every run, and every rank end
    counted by cause and by how it ended."""
    ranks = [r for run in runs for r in run["ranks"]]
    causes, hows = {}, {}
    for r in ranks:
        causes[r["cause"]] = causes.get(r["cause"], 0) + 1
        key = f"{r['how']} ({r['cause']})"
        hows[key] = hows.get(key, 0) + 1
    unexplained = [{"seed": run["seed"], **r} for run in runs for r in run["ranks"] if r["cause"] == UNEXPLAINED]
    return {"settings": settings, "runs_done": len(runs), "rank_ends": len(ranks), "causes": causes,
            "by_how": dict(sorted(hows.items(), key=lambda kv: -kv[1])), "unexplained": unexplained,
            "runs_with_problems": [{"seed": run["seed"], "problems": run["problems"]} for run in runs
                                   if run["problems"]],
            "runs": runs, "repo": REPO, "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def report(result):
    lines = [f"chaos loop: {result['runs_done']} runs, {result['rank_ends']} rank ends: "
             + ", ".join(f"{n} {cause}" for cause, n in sorted(result["causes"].items()))]
    lines += [f"  {n} {how}" for how, n in result["by_how"].items()]
    for r in result["unexplained"]:
        top = (r.get("backtrace") or {}).get("crashed_thread") or {}
        lines.append(f"  unexplained: seed {r['seed']}, pid {r['pid']} (world {r['world']}, rank {r['rank']}): "
                     f"{r['how']}: {r['why']}" + (f"; stack: {' | '.join(top.get('frames', [])[:8])}" if top else ""))
    for run in result["runs_with_problems"]:
        lines.append(f"  seed {run['seed']}: {'; '.join(run['problems'])[:600]}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
