"""What every script in bench/ shares, so that a script says only what it
measures:

- where things are (HERE: bench/, REPO, RESULTS: bench/results/); importing
  this module puts tests/ (mpi_harness, fake_cluster) and this checkout on
  sys.path;
- interleaved rounds over several ways of doing one thing (`interleave`,
  `timed`): the reference and the candidates run alternately, round after
  round, so that drift on the machine falls on all of them alike;
- medians and spread per way (`medians`, `spread`, `median_or_none`);
- the flags the scripts share (`arguments`);
- result files with the machine's facts beside the figures (`write_result`).

The machine's facts and the quiet-machine check are bench/machine.py's;
starting a job and reading back its result, bench/jobs.py's.
"""
import argparse
import json
import os
import statistics
import sys
import time

import machine

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
# tests/ holds what the drivers start jobs with (mpi_harness, fake_cluster);
# this checkout's mxplugin is appended, not put first, so that an installed
# build against another MPI wins (bench/each_mpi.py runs these scripts so).
for _path in (os.path.join(REPO, "tests"), REPO):
    if _path not in sys.path:
        sys.path.append(_path)


# -- rounds --------------------------------------------------------------------------------

def timed(fn, before=None, wait=None):
    """A way that returns seconds: runs before() off the clock (a barrier,
    fresh inputs), then times fn() and wait() (what makes fn's work done,
    e.g. mx.nd.waitall)."""
    def run():
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        if wait is not None:
            wait()
        return time.perf_counter() - start
    return run


def interleave(ways, rounds, warmup=0, rotate=False, after_round=None):
    """Runs every way of `ways` ({name: callable returning a sample}) once a
    round, round after round, and returns {name: [its sample of each
    measured round]}. The first `warmup` rounds are run and dropped. With
    `rotate`, round r starts at the r-th way, so that none is always first
    (or last, next to whatever follows). after_round(i, {name: sample}) is
    called after measured round i (from 0), e.g. to print progress."""
    names = list(ways)
    samples = {name: [] for name in names}
    for r in range(warmup + rounds):
        shift = r % len(names) if rotate else 0
        this_round = {}
        for name in names[shift:] + names[:shift]:
            this_round[name] = ways[name]()
        if r >= warmup:
            for name in names:
                samples[name].append(this_round[name])
            if after_round is not None:
                after_round(r - warmup, this_round)
    return samples


# -- medians and spread --------------------------------------------------------------------

def medians(samples):
    """{name: median} of {name: [samples]}."""
    return {name: statistics.median(values) for name, values in samples.items()}


def median_or_none(values):
    """The median of the values that are not None (a run that did not
    finish), None where there are none."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(samples):
    """{name: {min, q1, median, q3, max}} of {name: [samples]}: how far a
    median can be trusted, beside it."""
    out = {}
    for name, values in samples.items():
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        out[name] = {"min": min(values), "q1": q1, "median": statistics.median(values), "q3": q3,
                     "max": max(values)}
    return out


# -- flags ---------------------------------------------------------------------------------

# flag: (type, what it counts)
FLAGS = {
    "rounds": (int, "interleaved rounds"),
    "iters": (int, "measured iterations"),
    "warmup": (int, "warm-up iterations"),
    "steps": (int, "measured steps"),
    "output": (str, "the result file"),
}


def arguments(doc, **flags):
    """An ArgumentParser showing the script's docstring, with the shared
    flags named: --rounds 3, or --iters (10, "measured calls per size") to
    say what it counts; output names a file in bench/results/. The script
    adds its own flags to what this returns."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, value in flags.items():
        kind, what = FLAGS[name]
        default, what = value if isinstance(value, tuple) else (value, what)
        if name == "output":
            default = result_path(default)
        shown = os.path.relpath(default, REPO) if name == "output" else default
        parser.add_argument(f"--{name}", type=kind, default=default, help=f"{what} (default {shown})")
    return parser


# -- results -------------------------------------------------------------------------------

def result_path(name):
    """`name` in bench/results/, or `name` itself where it is a path."""
    return name if os.path.dirname(name) else os.path.join(RESULTS, name)


def write_result(name, result):
    """Writes `result` to `name` (see result_path) with the machine's facts
    under "machine" (the result's own "machine" entries added to them), and
    says where."""
    path = result_path(name)
    record = {**result, "machine": {**machine.facts(), **result.get("machine", {})}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print(f"wrote {path}", flush=True)
    return path


def read_result(name):
    """A result file's contents, None where there is none."""
    path = result_path(name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)
