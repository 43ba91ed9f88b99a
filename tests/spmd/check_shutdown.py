"""shutdown() on rank 1 while other ranks (and rank 1 itself) have ops
pending: the pending ops fail with an error that says mxplugin was shut down,
nothing hangs, and later ops raise promptly everywhere."""
import sys
import time

from common import hvd, mx, say, start

from mxnet.base import MXNetError

from mxplugin import PeerFailureError


r, n = start()
ODD = 1


def expect_shut_down(fn, what):
    t0 = time.time()
    try:
        fn()
    except (MXNetError, PeerFailureError) as e:
        assert "shut down" in str(e), f"rank {r}: {what}: unexpected error:\n{e}"
    else:
        raise AssertionError(f"rank {r}: {what}: no error")
    elapsed = time.time() - t0
    assert elapsed < 30, f"rank {r}: {what}: took {elapsed:.1f} s to fail"


# An op only this rank submits: it stays pending until something ends it.
pending = hvd.allreduce(mx.nd.ones((4,)), name=f"pending.{r}", op=hvd.Sum)
time.sleep(0.3)  # let the engine hand it to the core
hvd.barrier()
if r == ODD:
    hvd.shutdown()
    try:
        hvd.allreduce(mx.nd.ones((4,)), name="after_shutdown")
    except ValueError as e:  # NotInitializedError
        assert "not been initialized" in str(e), str(e)
    else:
        raise AssertionError("allreduce after shutdown did not raise")
    try:
        hvd.init()
    except ValueError as e:
        assert "after shutdown" in str(e), str(e)
    else:
        raise AssertionError("init() after shutdown did not raise")
expect_shut_down(pending.asnumpy, "pending op when a rank shuts down")
if r != ODD:
    # The whole job stops together: later ops fail at the call or on read.
    expect_shut_down(lambda: hvd.allreduce(mx.nd.ones((4,)), name="late").asnumpy(), "allreduce afterwards")
    expect_shut_down(hvd.barrier, "barrier afterwards")

say(f"PASS {r}")
hvd.shutdown()
