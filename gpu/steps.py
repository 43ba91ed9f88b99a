"""The steps of gpu/run_gpu_suite.py. Each has a title, says what it would do
(describe(suite), for --dry-run) and does it (run(suite)), returning
(status, detail); what it finds goes into suite.results. A step reaches the
machine only through suite.command, which logs and time-limits it."""
import json
import os
import runpy
import shutil
import subprocess
import sys

import discover
import fake_hosts
import mpich_wheel
import pytest_report
from gpu_probe import no_gpu_reason

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OK, FAILED, SKIPPED = "ok", "failed", "skipped"
# The core-only GPU variant: the GPU machine has CUDA, NCCL and CuPy but no
# MXNet (GPU.md). "1" makes the build fail, saying why, if a part is missing.
BUILD_SWITCHES = {"MXPLUGIN_WITH_MXNET": "0", "MXPLUGIN_WITH_CUDA": "1", "MXPLUGIN_WITH_NCCL": "1"}
DEFAULT_ARCHS = "90"  # H100 and H200
# Seconds each kind of step may take at most (the suite's own limit may cut it shorter).
LIMITS = {"mpi": 120, "build": 300, "environment": 90, "pytest": 300}


def tail_text(tail, chars=300):
    return tail.strip()[-chars:]


class MpiStep:
    """The mpich wheel installed under --mpich-prefix unless it is there; the
    build and every later step then use that MPI."""
    title = "MPI"

    def plan(self, suite):
        """('present' | 'install' | 'other' | 'missing', the wheel or the other mpicc)."""
        if os.path.exists(os.path.join(suite.args.mpich_prefix, "bin", "mpicc")):
            return "present", None
        wheel = mpich_wheel.find_wheel(suite.args.mpich_wheel, REPO)
        if wheel:
            return "install", wheel
        other = mpich_wheel.other_mpicc(suite.env)
        return ("other", other) if other else ("missing", None)

    def describe(self, suite):
        plan, what = self.plan(suite)
        prefix = suite.args.mpich_prefix
        if plan == "present":
            return f"use the MPI in {prefix}"
        if plan == "install":
            return f"{' '.join(mpich_wheel.install_command(what, prefix))}, then use it"
        if plan == "other":
            return f"no mpich wheel and nothing in {prefix}: use {what}"
        return "no MPI found: put the mpich wheel in .whl/ or pass --mpich-wheel"

    def run(self, suite):
        plan, what = self.plan(suite)
        prefix = suite.args.mpich_prefix
        if plan == "install":
            # pip's refusal to touch a system Python (PEP 668) is not about a prefix of our own
            rc, _, tail = suite.command(mpich_wheel.install_command(what, prefix), LIMITS["mpi"],
                                        dict(suite.env, PIP_BREAK_SYSTEM_PACKAGES="1"))
            if rc != 0 or not os.path.exists(os.path.join(prefix, "bin", "mpicc")):
                return FAILED, f"installing {what} into {prefix} failed (exit {rc}): {tail_text(tail)}"
        if plan in ("present", "install"):
            suite.env.update(mpich_wheel.prefix_environment(prefix, suite.env))
            return OK, (f"installed {os.path.basename(what)} into {prefix}" if what else f"using {prefix}")
        if plan == "other":
            return OK, f"no mpich wheel: using {what}"
        return FAILED, self.describe(suite)


def gpu_archs():
    """'90' for compute capability 9.0, from nvidia-smi; None if it cannot tell."""
    try:
        rows = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    archs = sorted({row.replace(".", "") for row in rows if row.replace(".", "").isdigit()})
    return ";".join(archs) or None


class BuildStep:
    """The extension built in place, as GPU.md's core-only command does."""
    title = "build"

    def settings(self, suite):
        return dict(BUILD_SWITCHES, MXPLUGIN_CUDA_ARCHS=suite.args.cuda_archs or gpu_archs() or DEFAULT_ARCHS)

    def command(self, suite):
        return [sys.executable, "setup.py", "build_ext", "--inplace", "-j", str(suite.args.jobs)]

    def describe(self, suite):
        if suite.args.no_build:
            return "skipped (--no-build)"
        return " ".join([f"{k}={v}" for k, v in self.settings(suite).items()] + self.command(suite))

    def run(self, suite):
        if suite.args.no_build:
            return SKIPPED, "--no-build: testing the extension already built here"
        settings = self.settings(suite)
        rc, _, tail = suite.command(self.command(suite), LIMITS["build"], dict(suite.env, **settings))
        if rc != 0:
            return FAILED, f"exit {rc}: {tail_text(tail, 400)}"
        # the tests then check that the build followed the switches (tests/test_build.py)
        suite.env.update(settings)
        return OK, f"MXPLUGIN_CUDA_ARCHS={settings['MXPLUGIN_CUDA_ARCHS']}"


class EnvironmentStep:
    """gpu/environment.py's record; CuPy's device count from it decides where
    fake hosts are needed."""
    title = "environment"

    def describe(self, suite):
        return "python3 gpu/environment.py"

    def run(self, suite):
        path = os.path.join(suite.work, "environment.json")
        rc, _, tail = suite.command([sys.executable, os.path.join(HERE, "environment.py"), path],
                                    LIMITS["environment"])
        if rc != 0 or not os.path.exists(path):
            return FAILED, f"exit {rc}: {tail_text(tail)}"
        with open(path) as f:
            found = json.load(f)
        suite.results["environment"] = found
        if isinstance(found.get("gpu_count"), int):
            suite.gpus = found["gpu_count"]
        return OK, "; ".join(f"{k}: {v}" for k, v in found["summary"].items()) + f"; {suite.gpus} GPU(s)"


class DiscoveryStep:
    """What was found to run, and whether anything GPU-related would run nowhere."""
    title = "discovery"

    def describe(self, suite):
        return (f"test files {suite.tests}; benchmarks {[r.name for r in suite.bench_runs]}; "
                "every GPU program named by a test file")

    def run(self, suite):
        unrun = [] if suite.args.tests else discover.programs_no_test_runs(REPO, suite.tests)
        suite.results["discovery"] = {"test_files": suite.tests, "benchmark_runs": [r.name for r in suite.bench_runs],
                                      "gpu_programs": discover.gpu_programs(REPO),
                                      "gpu_programs_no_test_runs": unrun,
                                      "benchmarks_with_no_runs": suite.unknown_benchmarks}
        problems = ([f"{p} is run by no GPU test file" for p in unrun] +
                    [f"{b} has no entry in gpu/benchmarks.py" for b in suite.unknown_benchmarks])
        if problems:
            return FAILED, "; ".join(problems)
        return OK, f"{len(suite.tests)} test files, {len(suite.bench_runs)} benchmark runs"


class PytestStep:
    """One test file in a pytest of its own: its counts, skip reasons and failures."""

    def __init__(self, test_file):
        self.test_file = test_file
        self.title = f"pytest {test_file}"

    def command(self, report):
        return [sys.executable, "-m", "pytest", self.test_file, "-v", "-rfEs", "-p", "no:cacheprovider",
                f"--junitxml={report}"]

    def describe(self, suite):
        return " ".join(self.command("REPORT.xml"))

    def run(self, suite):
        report = os.path.join(suite.work, os.path.basename(self.test_file) + ".xml")
        rc, seconds, tail = suite.command(self.command(report), LIMITS["pytest"])
        record = {"rc": rc, "seconds": round(seconds, 1)}
        suite.results["tests"][self.test_file] = record
        if rc is None or not os.path.exists(report):
            record["output_tail"] = tail
            if rc is None:
                return FAILED, f"stopped at its time limit after {seconds:.0f} s"
            return FAILED, f"pytest exit {rc} and no report: {tail_text(tail)}"
        record.update(pytest_report.summarise(report))
        counts = (f"{record['passed']} passed, {record['failed']} failed, {record['errors']} errors, "
                  f"{record['skipped']} skipped")
        for reason, count in sorted(record["skip_reasons"].items()):
            suite.log.say(f"    {count} skipped: {reason}")
        for failure in record["failures"]:
            suite.log.say(f"    FAILED {failure['test']}: {(failure['message'].splitlines() or [''])[0][:200]}")
        # pytest's 5: nothing collected, which a file skipped whole also gives
        if record["failed"] or record["errors"] or rc not in (0, 5):
            record["output_tail"] = tail
            return FAILED, f"{counts}; exit {rc}"
        return OK, counts


def mpiexec(suite):
    """The mpiexec mxplugin was built with (read from the file, not imported:
    this process loads no part of mxplugin), else the one on the suite's PATH."""
    info = os.path.join(REPO, "mxplugin", "_build_info.py")
    built = runpy.run_path(info).get("MPIEXEC") if os.path.exists(info) else None
    return built if built and os.path.exists(built) else shutil.which("mpiexec", path=suite.env.get("PATH"))


class BenchmarkStep:
    """One run of a GPU benchmark (gpu/benchmarks.py); its JSON output becomes
    its figures. Ranks beyond the GPUs run as fake hosts (tests/fake_hosts.py)."""

    def __init__(self, run):
        self.bench = run
        self.title = f"benchmark {run.name}"

    def command(self, suite, output):
        """(the command, '') or (None, why it cannot run here)."""
        cmd = [sys.executable, self.bench.script, *self.bench.args, "--output", output]
        if not self.bench.ranks:
            return cmd, ""
        launcher = mpiexec(suite) or "mpiexec"
        launch, why = fake_hosts.launch_options(self.bench.ranks, max(suite.gpus, 1), launcher, suite.fakessh)
        if launch is None:
            return None, why
        return [launcher, *launch, "-n", str(self.bench.ranks), *cmd], ""

    def describe(self, suite):
        cmd, why = self.command(suite, f"{self.bench.name}.json")
        return " ".join(cmd) if cmd else f"cannot run here: {why}"

    def run(self, suite):
        record = {"script": self.bench.script, "ranks": max(self.bench.ranks, 1)}
        suite.results["benchmarks"][self.bench.name] = record
        if suite.gpus < 1:
            record["skipped"] = no_gpu_reason() or "no CUDA device"
            return SKIPPED, record["skipped"]
        output = os.path.join(suite.work, self.bench.name + ".json")
        cmd, why = self.command(suite, output)
        if cmd is None:
            return FAILED, why
        record["fake_hosts"] = "-launcher-exec" in cmd
        rc, seconds, tail = suite.command(cmd, self.bench.time_limit)
        record.update(rc=rc, seconds=round(seconds, 1))
        if rc == 0 and os.path.exists(output):
            with open(output) as f:
                record["figures"] = json.load(f)
            return OK, "figures recorded" + (" (fake hosts)" if record["fake_hosts"] else "")
        record["output_tail"] = tail
        if rc is None:
            return FAILED, f"stopped at its time limit after {seconds:.0f} s"
        return FAILED, f"exit {rc}: {tail_text(tail)}"
