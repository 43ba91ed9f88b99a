"""A benchmark's jobs: the driver starts each in fresh processes (one
process, or ranks under mpiexec) and reads back what its rank 0 printed as
one `RESULT <json>` line. A job that fails ends the driver, with the tail of
its output: a benchmark goes on with no missing figure."""
import functools
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "RESULT "


def print_result(record):
    """In a job (on rank 0): hands `record` to the driver."""
    print(PREFIX + json.dumps(record), flush=True)


def result_in(text, what):
    """The record of the last RESULT line in a job's output."""
    lines = [line for line in text.splitlines() if line.startswith(PREFIX)]
    if not lines:
        raise SystemExit(f"{what}: no {PREFIX.strip()} line in its output:\n{text[-3000:]}")
    return json.loads(lines[-1][len(PREFIX):])


def check(done, what):
    """The stdout of a finished job (a CompletedProcess), or the end of the
    driver where it failed."""
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done.stdout


def run(cmd, env=None, timeout=600, what=None, cwd=REPO):
    """Runs `cmd` to its end; returns its stdout (see check)."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    return check(done, what or " ".join(cmd))


def run_job(cmd, env=None, timeout=600, what=None):
    """Runs a job; returns the record its rank 0 printed (print_result)."""
    what = what or " ".join(cmd)
    return result_in(run(cmd, env, timeout, what), what)


def mpi_command(ranks, argv, bind=None):
    """argv on `ranks` ranks under the mpiexec mxplugin was built with (one
    rank: a plain process); bind "core": each rank bound to a core of its
    own (as a user binds them with mxplugin-run's --binding-args), "none":
    not bound whatever the launcher's default (Open MPI binds 2 ranks),
    None: the launcher's default."""
    from mpi_harness import mpiexec_path

    if ranks <= 1:
        return [str(a) for a in argv]
    return [mpiexec_path(), *(binding_arguments(mpiexec_path(), bind) if bind else []), "-n", str(ranks)] + [
        str(a) for a in argv]


@functools.lru_cache(maxsize=None)
def binding_arguments(mpiexec, policy):
    """The launcher's arguments binding each rank by `policy` ("core", "none"), in Hydra's or Open MPI's spelling."""
    from mxplugin_run.mpi_family import OPEN_MPI, launcher_family

    return ["--bind-to" if launcher_family(mpiexec)[0] == OPEN_MPI else "-bind-to", policy]


def this_script(path, *args):
    """The command that runs the bench script at `path` again with `args`
    (a driver starting its own worker mode)."""
    return [sys.executable, os.path.abspath(path), *map(str, args)]
