import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import prebuild  # noqa: E402

# A core-only build (MXPLUGIN_WITH_MXNET=0) runs only these modules, and of
# test_core_raw.py only test_raw_core; everything else needs MXNet and is
# reported as skipped there. Add a module here when it (and the SPMD
# scripts it runs) needs no MXNet.
CORE_ONLY_MODULES = {"test_build.py", "test_core_raw.py", "test_in_process.py", "test_cuda_kernels.py", "test_gpu_executor_host.py", "test_nccl.py",
                     "test_gpu_soak.py"}
CORE_ONLY_SKIP = "needs MXNet: this mxplugin is a core-only build (MXPLUGIN_WITH_MXNET=0)"


def core_only_build():
    try:
        from mxplugin._build_info import MXNET_BUILT
    except ImportError:  # not built, or built before core-only builds
        return False
    return not MXNET_BUILT


class NeedsMXNet(pytest.Module):
    """A test module that is not imported in a core-only build (it may
    import mxnet at the top) and is reported as one skip."""

    def collect(self):
        pytest.skip(f"{self.path.name} {CORE_ONLY_SKIP}")


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.name not in CORE_ONLY_MODULES and core_only_build():
        return NeedsMXNet.from_parent(parent, path=module_path)
    return None


# The modules of the slow part of the suite (`-m slow`; day-to-day work runs
# `pytest -m "not slow"`, CI runs everything): each starts jobs on fake
# hosts, builds against other MPIs or packages, waits out timeouts, or
# trains for long, or (test_trainer.py, test_ops.py, test_join.py,
# test_array_kinds.py) runs many 2-3 rank jobs. A quiet 2-core machine,
# 2026-11-28, pytest -m "not slow" --durations=0 before the first two
# moved: 507 s in all (another run: 644 s), of it test_trainer.py 125 s and
# test_ops.py 105 s; after: 299 s, and 318 s with test_join.py moved too
# (timings here vary by a fifth), so test_array_kinds.py (60-80 s) too.
# 2026-11-29, with the suite's other speed-ups and `-n 2`: 167 s
# (docs/reliability.md, "The suite's time on a quiet machine").
SLOW_MODULES = {"test_chaos.py", "test_clusters.py", "test_elastic.py", "test_elastic_partition.py",
                "test_examples.py", "test_fuzz.py", "test_gluonts.py", "test_gpu_soak.py", "test_mpi_variants.py",
                "test_multi_host.py", "test_packaging.py", "test_reliability.py", "test_slurm.py",
                "test_errors.py", "test_parallel.py", "test_sharding.py", "test_powersgd.py", "test_trainer.py",
                "test_ops.py", "test_join.py",
                "test_array_kinds.py"}


# Modules started first, longest first (quiet 2-core machine, 2026-11-29,
# whole suite one module after another: elastic_partition 221 s, multi_host
# 185, chaos 157, ops 123, elastic 121, gluonts 109, reliability 105,
# parallel 91, mpi_variants 82 and its builds, powersgd 74, sharding 72,
# errors 71, trainer 71; packaging for its build); the rest keep their order. pytest's workers
# (pytest-xdist, `-n 2` in the README's commands) take whole modules in this
# order (pytest_xdist_make_scheduler below), so that no long module is left
# to run alone at the end while the other worker idles.
LONGEST_FIRST = ["test_mpi_variants.py", "test_elastic_partition.py", "test_multi_host.py", "test_chaos.py",
                 "test_packaging.py", "test_ops.py", "test_elastic.py", "test_gluonts.py", "test_reliability.py",
                 "test_parallel.py", "test_powersgd.py", "test_sharding.py", "test_errors.py", "test_trainer.py",
                 "test_array_kinds.py"]


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    if not core_only_build():
        return
    for item in items:
        if item.path.name == "test_core_raw.py" and item.originalname != "test_raw_core":
            item.add_marker(pytest.mark.skip(reason=CORE_ONLY_SKIP))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `-n N`: each module whole on one worker (its module fixtures, a
    fake cluster, a build, made once), the modules handed out in the
    collection's order (LONGEST_FIRST), not xdist's most-tests-first. While
    one worker's ranks wait (a peer timeout, a cut link, a cool-down) or it
    builds, the other's run."""
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


def pytest_collection_finish(session):
    """The builds the selected tests need start now, in the background
    (tests/prebuild.py)."""
    if session.config.option.collectonly or session.config.option.setupplan:
        return
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker does not know which modules it will be given (every worker
        # collects every test): each build runs when its fixture first asks,
        # on the worker that needs it, while the other worker runs its tests.
        return
    prebuild.start(prebuild.needed_by(session.items))


def pytest_sessionfinish(session):
    prebuild.stop()
