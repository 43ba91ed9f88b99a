"""The package as users install it: an sdist built from this tree, a wheel
built from that sdist, installed into a fresh virtual environment (its
dependencies from the package index, as a user's would be) and used from a
directory outside the source tree, through the installed `mxplugin-run`.

An editable install (the README's, and the rest of this suite's) imports
from the source tree, so it cannot see a subpackage or file missing from the
package: `mxplugin.elastic` once was, and `import mxplugin` then failed for
everyone who ran `pip install .`."""
import glob
import importlib.util
import os
import shutil
import sys
import tarfile
import textwrap

import pytest

import prebuild
from mpi_harness import REPO

# A rank's job through the installed launcher: collectives, a trainer step,
# and where mxplugin was imported from.
JOB = """
import mxnet as mx
import mxplugin as hvd
from mxnet import autograd, gluon

hvd.init()
total = hvd.allreduce(mx.nd.ones(3) * (hvd.rank() + 1), op=hvd.Sum).asnumpy().tolist()
net = gluon.nn.Dense(2, in_units=3)
net.initialize(mx.init.Constant(0.5))
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
with autograd.record():
    loss = net(mx.nd.ones((4, 3)) * (hvd.rank() + 1)).sum()
loss.backward()
trainer.step(4)
print(f"rank {hvd.rank()} of {hvd.size()} sum {total} weight {net.weight.data()[0, 0].asscalar():.6f} "
      f"from {hvd.__file__}", flush=True)
"""

# An elastic job through the installed launcher: its ranks run beside the
# installed launcher package's agent.
ELASTIC_JOB = """
import mxnet as mx
import mxplugin as hvd

hvd.init()
state = hvd.elastic.ObjectState(step=0)

@hvd.elastic.run
def train(state):
    while state.step < 3:
        hvd.allreduce(mx.nd.ones(2), name="step").wait_to_read()
        state.step += 1
        state.commit()
    return state.step

print(f"elastic rank {hvd.rank()} of {hvd.size()} steps {train(state)}", flush=True)
"""


def run(cmd, cwd, env, timeout, what):
    result = prebuild.run(cmd, cwd=cwd, env=env, timeout=timeout)
    assert result.returncode == 0, f"{what}: exit {result.returncode}\n--- stdout\n{result.stdout}\n" \
                                   f"--- stderr\n{result.stderr}"
    return result.stdout + result.stderr


def outside_env(venv):
    """The environment of a user of the fresh venv: nothing of this
    checkout or of the suite's own venv on any path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    suite_bin = os.path.dirname(sys.executable)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(suite_bin)]
    env["PATH"] = os.pathsep.join([os.path.join(venv, "bin")] + path)
    env["VIRTUAL_ENV"] = venv
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def make_installed(work):
    """A fresh venv holding mxplugin installed from a wheel built from an
    sdist, under `work`. Built ahead of the tests (tests/prebuild.py)."""
    for module in ("build", "Cython"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(f"building the package needs '{module}': the test extra installs it "
                        "(pip install -e '.[test]')")
    dist = os.path.join(work, "dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --no-isolation: the build's requirements are this venv's own (the test
    # extra holds Cython); an isolated build would fetch and install MXNet again.
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", dist, REPO], REPO, env, 300,
        "building the sdist")
    sdist, = glob.glob(os.path.join(dist, "mxplugin-*.tar.gz"))
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", dist, sdist],
        work, {**env, **prebuild.NO_DEBUG_INFO}, 900, "building a wheel from the sdist")
    wheel, = glob.glob(os.path.join(dist, "mxplugin-*.whl"))
    venv = os.path.join(work, "venv")
    run([sys.executable, "-m", "venv", venv], work, env, 120, "creating a fresh venv")
    user_env = outside_env(venv)
    run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", wheel], work, user_env, 900,
        "installing the wheel into the fresh venv")
    return {"venv": venv, "env": user_env, "sdist": sdist, "wheel": wheel, "cwd": work}


INSTALLED = prebuild.Build("packaging", __file__, "installed", make_installed)


@pytest.fixture(scope="module")
def installed():
    """A fresh venv holding mxplugin installed from a wheel built from an sdist."""
    return INSTALLED.result()


def test_sdist_holds_what_the_build_needs(installed):
    with tarfile.open(installed["sdist"]) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in ("setup.py", "build_support.py", "pyproject.toml", "mxplugin/_core.pyx", "mxplugin/_core.pxd",
                   "src/c_api.h", "cuda/scale_kernels.cu", "mxplugin_run/rank_agent.py"):
        assert needed in names, f"{needed} missing from the sdist"
    assert "mxplugin/_build_info.py" not in names, "the sdist ships one machine's build info"


def test_every_module_imports_from_the_installed_package(installed):
    """Every module of both packages imports from the venv; the launcher's
    (mxplugin_run) all together load neither MXNet nor mxplugin."""
    venv = installed["venv"]
    launcher = textwrap.dedent(f"""
        import importlib, os, pkgutil, sys
        import mxplugin_run
        assert os.path.dirname(mxplugin_run.__file__).startswith({venv!r}), mxplugin_run.__file__
        names = sorted(m.name for m in pkgutil.walk_packages(mxplugin_run.__path__, "mxplugin_run."))
        for name in names:
            importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("mxnet", "mxplugin"))
        assert not loaded, loaded
        print("imported", len(names), "modules:", " ".join(names))
    """)
    out = run([os.path.join(venv, "bin", "python"), "-c", launcher], installed["cwd"], installed["env"], 300,
              "importing the launcher's modules")
    for name in ("mxplugin_run.run", "mxplugin_run.rank_agent", "mxplugin_run.elastic.agent_requests"):
        assert name in out, out
    check = textwrap.dedent(f"""
        import importlib, importlib.util, os, pkgutil, sys
        import mxplugin
        root = os.path.dirname(mxplugin.__file__)
        assert root.startswith({venv!r}), root
        names = sorted(m.name for m in pkgutil.walk_packages(mxplugin.__path__, "mxplugin."))
        has_gluonts = importlib.util.find_spec("gluonts") is not None
        for name in names:
            if name.startswith("mxplugin.gluonts") and not has_gluonts:
                # An optional extra: without it, a clear ImportError saying how to get it.
                try:
                    importlib.import_module(name)
                except ImportError as e:
                    assert "mxplugin[gluonts]" in str(e), (name, str(e))
                else:
                    raise AssertionError(name + " imported without gluonts installed")
                continue
            importlib.import_module(name)
        import mxplugin.elastic, mxplugin.parallel, mxplugin.mpi_ops
        print("imported", len(names), "modules:", " ".join(names))
    """)
    out = run([os.path.join(venv, "bin", "python"), "-c", check], installed["cwd"], installed["env"], 300,
              "importing every module")
    for name in ("mxplugin.elastic.runner", "mxplugin.parallel.layers", "mxplugin._core", "mxplugin.mpi_ops"):
        assert name in out, out


def test_installed_launcher_runs_a_two_rank_job(installed):
    venv, cwd = installed["venv"], installed["cwd"]
    script = os.path.join(cwd, "job.py")
    with open(script, "w") as f:
        f.write(JOB)
    launcher = os.path.join(venv, "bin", "mxplugin-run")
    out = run([launcher, "--check-build"], cwd, installed["env"], 120, "mxplugin-run --check-build")
    assert "MPI" in out, out
    out = run([launcher, "-np", "2", os.path.join(venv, "bin", "python"), script], cwd, installed["env"], 300,
              "a 2-rank job through the installed mxplugin-run")
    lines = sorted(line for line in out.splitlines() if line.startswith("rank "))
    assert len(lines) == 2, out
    for rank, line in enumerate(lines):
        assert line.startswith(f"rank {rank} of 2 sum [3.0, 3.0, 3.0] "), line
        assert f"from {venv}" in line, line
    # Both ranks took the same averaged step: the same weight everywhere.
    assert len({line.split(" weight ")[1].split()[0] for line in lines}) == 1, out


def test_installed_launcher_runs_an_elastic_job(installed):
    venv, cwd = installed["venv"], installed["cwd"]
    script = os.path.join(cwd, "elastic_job.py")
    with open(script, "w") as f:
        f.write(ELASTIC_JOB)
    out = run([os.path.join(venv, "bin", "mxplugin-run"), "-np", "2", "--min-np", "2", "--max-np", "2",
               os.path.join(venv, "bin", "python"), script], cwd, installed["env"], 300,
              "an elastic job through the installed mxplugin-run")
    assert sorted(line for line in out.splitlines() if line.startswith("elastic rank ")) == [
        "elastic rank 0 of 2 steps 3", "elastic rank 1 of 2 steps 3"], out


def test_no_source_tree_on_the_installed_path(installed):
    """The checks above mean something only if the fresh venv cannot reach this checkout."""
    out = run([os.path.join(installed["venv"], "bin", "python"), "-c", "import sys; print('\\n'.join(sys.path))"],
              installed["cwd"], installed["env"], 60, "reading sys.path")
    assert not any(os.path.realpath(p) == os.path.realpath(REPO) for p in out.splitlines() if p), out
    assert shutil.which("mxplugin-run", path=installed["env"]["PATH"]).startswith(installed["venv"])


def test_horovod_module_layout():
    """`from horovod.mxnet.mpi_ops import ...` becomes `from mxplugin.mpi_ops import ...`:
    the same objects as the package's own, and every name horovod.mxnet.mpi_ops offers for MXNet."""
    import mxplugin
    from mxplugin import mpi_ops

    for name in ("allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather",
                 "grouped_allgather", "broadcast", "broadcast_", "alltoall", "reducescatter",
                 "grouped_reducescatter", "init", "shutdown", "size", "rank", "local_rank", "local_size",
                 "cross_rank", "cross_size", "is_initialized", "mpi_threads_supported", "ProcessSet",
                 "global_process_set", "add_process_set", "remove_process_set", "Average", "Sum", "Adasum",
                 "Min", "Max", "Product", "nccl_built", "mpi_built"):
        assert getattr(mpi_ops, name) is getattr(mxplugin, name), name
