"""Names that never match: rank 0 submits 'a', the other ranks 'b'. Run with
MXPLUGIN_STALL_CHECK_TIME_SECONDS=1 and MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS=3:
the coordinator warns, then both ops fail on the ranks that submitted them;
afterwards the library works."""
import sys
import time

from common import assert_close, hvd, mx, np, rank_data, finish, say, start

from mxnet.base import MXNetError


r, n = start()
name = "a" if r == 0 else "b"
missing = "ranks " + ", ".join(map(str, range(1, n))) if n > 2 else "rank 1"
if r != 0:
    missing = "rank 0"

t0 = time.time()
x = hvd.allreduce(mx.nd.ones((4,)), name=name, op=hvd.Sum)
try:
    x.asnumpy()
except MXNetError as e:
    elapsed = time.time() - t0
    msg = str(e)
    for part in (f"Tensor 'allreduce.{name}' was never submitted by {missing} within 3 s",
                 "MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS"):
        assert part in msg, f"rank {r}: expected {part!r} in:\n{msg}"
else:
    raise AssertionError(f"rank {r}: stalled op did not fail")
assert 2.5 < elapsed < 12, f"rank {r}: stalled op failed after {elapsed:.1f} s (expected ~3 s)"
say(f"rank {r}: stalled op failed after {elapsed:.1f} s")

# The library keeps working, the same names included.
out = hvd.allreduce(mx.nd.array(rank_data((5,), r)), op=hvd.Sum, name="after")
assert_close(out, sum(rank_data((5,), q) for q in range(n)), rtol=1e-5, what="allreduce after a stall")
for nm in ("a", "b"):
    assert_close(hvd.allreduce(mx.nd.ones((2,)), op=hvd.Sum, name=nm), np.full((2,), n), what=f"retry {nm}")
finish()
