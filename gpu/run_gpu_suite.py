"""Everything there is to run on the GPU machine (GPU.md), in one command:

    python3 gpu/run_gpu_suite.py [--output gpu_results.json] [--mpich-wheel WHEEL]

1. MPI: installs the `mpich` wheel (--mpich-wheel, or .whl/mpich-*.whl) with
   pip --prefix into /opt/mpich, unless an MPI is there already;
2. builds the core-only GPU variant in place (no MXNet, CUDA and NCCL
   required, SM versions of the GPU found);
3. records the environment (gpu/environment.py);
4. checks that every GPU program is run by some test file (gpu/discover.py);
5. runs every GPU test file, each in a pytest of its own; NCCL checks at 2
   and 3 ranks run as fake hosts on one GPU (tests/fake_hosts.py);
6. runs every GPU benchmark (gpu/benchmarks.py says how).

Writes ONE results file (JSON: environment, pytest counts and skip reasons per
file, each benchmark's figures, every step's status) after every step, and
the full log beside it (same name, .log). A failed step is recorded and the
rest still run; the exit status is 1 if anything failed. The whole run keeps
within --time-limit: steps that would start past it are recorded as not run.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# after this folder (sys.path[0]): the test helpers shared with the suite
sys.path.insert(1, os.path.join(REPO, "tests"))

import benchmarks  # noqa: E402
import discover  # noqa: E402
import fake_hosts  # noqa: E402
import steps  # noqa: E402
from gpu_probe import no_gpu_reason  # noqa: E402
from suite_log import SuiteLog  # noqa: E402

LEAST_USEFUL_SECONDS = 10  # a step given less than this is not started
NOT_RUN = "not run"


def default_output():
    return os.path.join(os.environ["OUT"], "gpu_results.json") if os.environ.get("OUT") else "gpu_results.json"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=default_output(),
                        help="the results file (default: $OUT/gpu_results.json if OUT is set, else "
                             "./gpu_results.json); the log goes beside it, with .log for .json")
    parser.add_argument("--mpich-wheel", help="the mpich wheel, or a folder holding one (default: .whl/ here)")
    parser.add_argument("--mpich-prefix", default="/opt/mpich",
                        help="where the wheel is installed (default %(default)s)")
    parser.add_argument("--cuda-archs", help="SM versions to build for, e.g. '90' (default: the GPU's, else 90)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles (default: every core)")
    parser.add_argument("--no-build", action="store_true", help="test the extension already built here")
    parser.add_argument("--tests", nargs="+", metavar="FILE", help="these test files instead of every GPU test file")
    parser.add_argument("--no-benchmarks", action="store_true", help="run no benchmark")
    parser.add_argument("--time-limit", type=float, default=530,
                        help="seconds the whole suite may take (default %(default)s: one call of under 9 minutes)")
    parser.add_argument("--dry-run", action="store_true", help="print the steps and their commands; run nothing")
    return parser.parse_args(argv)


def write_json(path, data):
    """Written whole or not at all: the file is read even if the suite is killed."""
    partial = path + ".partial"
    with open(partial, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(partial, path)


class Suite:
    """What the steps share: the arguments, the environment every command
    gets, the GPUs found, a work folder, the log and the results."""

    def __init__(self, args):
        self.args = args
        self.output = os.path.abspath(args.output)
        self.log = None
        self.work = None  # a temporary folder: junit reports, benchmark outputs, the fake ssh
        self.fakessh = "fakessh"  # its path there, once written
        self.env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                        PYTHONUNBUFFERED="1")
        self.gpus = 0 if no_gpu_reason() else 1  # until the environment step counts them
        self.deadline = time.monotonic() + args.time_limit
        self.tests = args.tests or discover.gpu_test_files(REPO)
        self.bench_runs, self.unknown_benchmarks = benchmarks.runs_for(
            [] if args.no_benchmarks else discover.gpu_benchmarks(REPO))
        self.steps = ([steps.MpiStep(), steps.BuildStep(), steps.EnvironmentStep(), steps.DiscoveryStep()] +
                      [steps.PytestStep(t) for t in self.tests] + [steps.BenchmarkStep(r) for r in self.bench_runs])
        self.results = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "command": [sys.executable] + sys.argv, "output": self.output,
                        "log": os.path.splitext(self.output)[0] + ".log", "ok": None, "failures": [],
                        "steps": [], "environment": None, "tests": {}, "test_totals": {}, "benchmarks": {}}

    def run(self):
        os.makedirs(os.path.dirname(self.output), exist_ok=True)
        self.log = SuiteLog(self.results["log"])
        self.work = tempfile.mkdtemp(prefix="gpu_suite.")
        self.fakessh = fake_hosts.write_fakessh(self.work)
        self.log.say(f"GPU suite: {len(self.steps)} steps; results {self.output}, log {self.results['log']}")
        try:
            for index, step in enumerate(self.steps, 1):
                self.run_step(f"[{index}/{len(self.steps)}] {step.title}", step)
        finally:
            shutil.rmtree(self.work, ignore_errors=True)
        self.finish()
        self.log.close()
        return 0 if self.results["ok"] else 1

    def run_step(self, tag, step):
        self.log.say(f"{tag} ...")
        start = time.monotonic()
        if self.seconds_left() < LEAST_USEFUL_SECONDS:
            status, detail = NOT_RUN, f"the suite's time limit ({self.args.time_limit:.0f} s, --time-limit) was reached"
        else:
            try:
                status, detail = step.run(self)
            except Exception:  # a bug in the suite itself: recorded, and the other steps still run
                self.log.note(traceback.format_exc())
                status, detail = steps.FAILED, "the suite's own step raised " + traceback.format_exc().splitlines()[-1]
        seconds = time.monotonic() - start
        self.results["steps"].append({"step": step.title, "status": status, "detail": detail,
                                      "seconds": round(seconds, 1)})
        if status in (steps.FAILED, NOT_RUN):
            self.results["failures"].append(f"{step.title}: {detail}")
        self.log.say(f"{tag}: {status} ({detail}) {seconds:.1f} s")
        write_json(self.output, self.results)

    def seconds_left(self):
        return self.deadline - time.monotonic()

    def command(self, cmd, limit, env=None):
        """(exit status, None if stopped at its time limit; seconds; the output's tail)."""
        return self.log.run(cmd, env or self.env, min(limit, self.seconds_left()), REPO)

    def finish(self):
        totals = {k: sum(t.get(k, 0) for t in self.results["tests"].values())
                  for k in ("passed", "failed", "errors", "skipped")}
        figures = sum(1 for b in self.results["benchmarks"].values() if b.get("figures"))
        self.results.update(test_totals=totals, ok=not self.results["failures"],
                            finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        write_json(self.output, self.results)
        self.log.say(f"tests: {totals['passed']} passed, {totals['failed']} failed, {totals['errors']} errors, "
                     f"{totals['skipped']} skipped; benchmarks with figures: {figures}/{len(self.bench_runs)}")
        for failure in self.results["failures"]:
            self.log.say(f"FAILED {failure}")
        self.log.say(f"{'all ok' if self.results['ok'] else 'something failed'}; wrote {self.output}")

    def dry_run(self):
        print(f"GPU suite (dry run): results would go to {self.output}, the log beside it; time limit "
              f"{self.args.time_limit:.0f} s; GPUs: {self.gpus if self.gpus else no_gpu_reason()}")
        for index, step in enumerate(self.steps, 1):
            print(f"[{index}/{len(self.steps)}] {step.title}: {step.describe(self)}")
        return 0


def main(argv=None):
    suite = Suite(parse_args(argv))
    return suite.dry_run() if suite.args.dry_run else suite.run()


if __name__ == "__main__":
    sys.exit(main())
