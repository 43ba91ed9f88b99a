"""Fifty allreduces, each with a priority of its own, submitted together
through the raw core over real MPI: the round is one data-plane call (Note
[Fusion across priorities]), whether the small tensors are fused (flat MPI)
or batched where they lie (the shared-memory data plane). The calls are
counted from the timeline: the tensors of one call share its ALLREDUCE span
to the nanosecond, while calls made one after another cannot. Argument: a
directory for the timelines."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402

N = 50
core = m.Core()
rank, size = core.topology()["rank"], core.topology()["size"]
out_dir = sys.argv[1]
core.start_timeline(os.path.join(out_dir, "fusion.{rank}.json"))

grads = [np.full(3 + k, rank + k, "float32") for k in range(N)]
ops = [m.Op(f"prio.{k}", m.OP_ALLREDUCE, m.DTYPES["float32"], [g.size], g.ctypes.data, g.ctypes.data,
            out_shape=[g.size], priority=-k) for k, g in enumerate(grads)]
core.enqueue(ops, 0).wait()
core.stop_timeline()
for k, g in enumerate(grads):
    np.testing.assert_array_equal(g, np.full(g.size, size * k + size * (size - 1) / 2, "float32"), err_msg=f"prio.{k}")

with open(os.path.join(out_dir, f"fusion.{rank}.json")) as f:
    events = json.load(f)
rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
spans = {(e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["name"] == "ALLREDUCE" and
         rows[e["tid"]].startswith("prio.")}
fused = any(e["ph"] == "X" and e["name"] == "MEMCPY_IN_FUSION_BUFFER" for e in events)
print(f"rank {rank}: {N} allreduces of distinct priorities in {len(spans)} data-plane call(s), "
      f"{'fused' if fused else 'where they lie'}")
assert len(spans) == 1, f"rank {rank}: {len(spans)} ALLREDUCE spans: {sorted(spans)}"
core.shutdown()
print(f"PASS {rank}")
