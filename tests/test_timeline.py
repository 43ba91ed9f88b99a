"""Timeline (Chrome trace JSON) and core logging."""
import json
import os

import pytest

from mpi_harness import assert_spmd_ok

TIMEOUT = 240
NP = 2


def load_trace(path):
    with open(path) as f:
        events = json.load(f)
    assert isinstance(events, list) and events, path
    return events


def rows(events):
    """tensor name -> list of phase names recorded on its row."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    out = {}
    for e in events:
        if e["ph"] == "X":
            out.setdefault(names[(e["pid"], e["tid"])], []).append(e["name"])
    return out


def check_events(events, rank):
    for e in events:
        assert e["pid"] == rank, e
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0, e


def check_idle_cycles(events):
    """Note [Doorbell]: on one host an idle loop sleeps until some rank has
    work, polling every 20 ms as a safety net, rather than every cycle time
    (1 ms). The last second of the trace is idle: count its rounds. A slower
    machine only makes fewer."""
    last_work = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    idle = sorted(e["ts"] for e in events if e["name"] == "CYCLE_START" and e["ts"] > last_work)
    assert len(idle) >= 5, f"only {len(idle)} rounds in the idle second"
    per_second = (len(idle) - 1) / ((idle[-1] - idle[0]) / 1e6)
    assert per_second <= 100, f"idle loops negotiated {per_second:.0f} rounds a second (expected at most 50)"


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("timeline_env")
    out, err = assert_spmd_ok("check_timeline.py", NP, ["env", d], env={"MXPLUGIN_LOG_LEVEL": "debug"},
                              timeout=TIMEOUT)
    return d, out, err


@pytest.fixture(scope="module")
def runtime_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("timeline_runtime")
    # Flat MPI, whose small allreduces are fused (the shared-memory data plane
    # of the other run takes them where they lie).
    out, err = assert_spmd_ok("check_timeline.py", NP, ["runtime", d],
                              env={"MXPLUGIN_LOG_LEVEL": "", "MXPLUGIN_HIERARCHICAL_ALLREDUCE": "0"}, timeout=TIMEOUT)
    return d, out, err


def test_timeline_from_environment(env_run):
    d = env_run[0]
    for rank in range(NP):
        events = load_trace(os.path.join(d, f"env.{rank}.json"))
        check_events(events, rank)
        by_tensor = rows(events)
        for i in range(3):
            for k in range(1, 5):  # small grouped tensors: the shared-memory data plane takes them where they lie
                phases = by_tensor[f"allreduce.w{i}.small_{k}of4"]
                assert "NEGOTIATE" in phases and "ALLREDUCE" in phases, (i, k, phases)
                assert "MEMCPY_IN_FUSION_BUFFER" not in phases, (i, k, phases)
            big = by_tensor[f"allreduce.w{i}.big"]  # large: reduced where it lies
            assert "NEGOTIATE" in big and "ALLREDUCE" in big, big
            assert "MEMCPY_IN_FUSION_BUFFER" not in big, big
            assert "BROADCAST" in by_tensor[f"broadcast.w{i}.bcast"]


def test_timeline_started_and_stopped_at_runtime(runtime_run):
    d = runtime_run[0]
    for rank in range(NP):
        first = load_trace(os.path.join(d, f"rt.{rank}.json"))
        check_events(first, rank)
        by_tensor = rows(first)
        assert all(".during." in name for name in by_tensor), sorted(by_tensor)  # nothing before/after
        for phase in ("NEGOTIATE", "MEMCPY_IN_FUSION_BUFFER", "ALLREDUCE", "MEMCPY_OUT_FUSION_BUFFER"):
            assert phase in by_tensor["allreduce.during.small_1of4"], phase  # flat MPI: fused
        assert "ALLREDUCE" in by_tensor["allreduce.during.big"]
        assert any(e["name"] == "CYCLE_START" for e in first), "mark_cycles=True recorded no cycles"
        check_idle_cycles(first)
        second = load_trace(os.path.join(d, f"rt2.{rank}.json"))  # closed by shutdown()
        check_events(second, rank)
        names = set(rows(second))
        assert "allreduce.second.small_1of4" in names and not any(".during." in x for x in names), names
        assert not any(e["name"] == "CYCLE_START" for e in second)


def test_log_level_debug(env_run):
    err = env_run[2]
    for rank in range(NP):
        assert f"[mxplugin rank {rank}] DEBUG: background loop started, {NP} ranks" in err, err


def test_default_log_level_is_quiet(runtime_run):
    assert "DEBUG" not in runtime_run[2], runtime_run[2]


def test_timeline_path_shared_by_all_ranks(tmp_path):
    """MXPLUGIN_TIMELINE (or HOROVOD_TIMELINE) set to one path for the whole job,
    as with horovodrun: the file must still be a valid trace."""
    path = tmp_path / "shared.json"
    assert_spmd_ok("check_timeline.py", NP, ["shared", tmp_path], env={"MXPLUGIN_TIMELINE": path},
                   timeout=TIMEOUT)
    events = load_trace(path)
    assert "allreduce.w0.small_1of4" in rows(events)
