"""Timeline recording. The test process checks the files' contents.

Usage: check_timeline.py env|runtime|shared <dir>
  env:     MXPLUGIN_TIMELINE=<dir>/env.<rank>.json, set before init().
  runtime: start_timeline(<dir>/rt.<rank>.json, mark_cycles=True) after init,
           stop_timeline(), then a second file <dir>/rt2.<rank>.json that
           shutdown() closes.
  shared:  MXPLUGIN_TIMELINE (from the environment) is one path for every rank,
           as horovodrun users set it."""
import json
import os
import sys
import time

mode, directory = sys.argv[1], sys.argv[2]
if mode == "env":
    os.environ["MXPLUGIN_TIMELINE"] = os.path.join(directory, "env.{rank}.json")  # {rank}: a file per rank

from common import assert_close, hvd, mx, np, finish, say, start  # noqa: E402


def workload(tag):
    """Small grouped allreduces (fused), a large one (not fused), a broadcast."""
    outs = hvd.grouped_allreduce([mx.nd.ones((8,)) * (i + 1) for i in range(4)], name=f"{tag}.small", op=hvd.Sum)
    big = hvd.allreduce(mx.nd.ones((100000,)), name=f"{tag}.big", op=hvd.Sum)  # 400 kB: reduced in place
    b = hvd.broadcast(mx.nd.ones((3,)) * r, root_rank=0, name=f"{tag}.bcast")
    for i, o in enumerate(outs):
        assert_close(o, np.full((8,), n * (i + 1)), what=f"{tag}.small {i}")
    assert_close(big, np.full((100000,), n), what=f"{tag}.big")
    assert_close(b, np.zeros(3), what=f"{tag}.bcast")


r, n = start()
if mode == "runtime":
    workload("before")
    path = os.path.join(directory, "rt.{rank}.json")
    hvd.start_timeline(path, mark_cycles=True)
    workload("during")
    time.sleep(1.0)  # an idle stretch: how often do idle loops negotiate? (the test counts)
    hvd.stop_timeline()
    path = path.replace("{rank}", str(r))
    with open(path) as f:
        json.load(f)  # complete as soon as stop_timeline() returns
    size = os.path.getsize(path)
    workload("after")
    assert os.path.getsize(path) == size, "timeline file grew after stop_timeline()"
    hvd.stop_timeline()  # stopping twice is harmless
    try:
        hvd.start_timeline(os.path.join(directory, "no", "such", "dir", "t.{rank}.json"))
    except ValueError as e:
        assert "cannot open timeline file" in str(e), str(e)
    else:
        raise AssertionError("start_timeline on an unwritable path did not raise")
    hvd.start_timeline(os.path.join(directory, "rt2.{rank}.json"))
    workload("second")
else:
    for i in range(3):
        workload(f"w{i}")
finish()
