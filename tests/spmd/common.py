"""Shared set-up for SPMD test scripts (run under mpiexec, one process per rank)."""
import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# this checkout, unless the test runs an installed mxplugin (tests/mpi_variants.py)
if not os.environ.get("MXPLUGIN_TEST_INSTALLED"):
    sys.path.insert(0, CHECKOUT)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import mxplugin as hvd  # noqa: E402

# examples/digits_data.py, the digits the examples train on (check_local_sgd.py, check_powersgd.py)
sys.path.insert(1, os.path.join(CHECKOUT, "examples"))


def start():
    hvd.init()
    return hvd.rank(), hvd.size()


def say(text):
    """One write per line: print() under PYTHONUNBUFFERED writes the text and
    the newline separately, and mpiexec can interleave two ranks' lines."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def finish():
    """Every rank reports success; the harness checks all of them did."""
    mx.nd.waitall()
    hvd.barrier()
    say(f"PASS {hvd.rank()}")
    hvd.shutdown()


def assert_close(actual, expected, rtol=1e-6, atol=0.0, what=""):
    actual = actual.asnumpy() if isinstance(actual, mx.nd.NDArray) else np.asarray(actual)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=f"rank {hvd.rank()}: {what}")


def rank_data(shape, rank, dtype="float32", seed=0):
    """Deterministic per-rank data any rank can recompute for any other rank."""
    rng = np.random.RandomState(seed * 1000 + rank)
    return (rng.uniform(-1, 1, size=shape) * 4).astype(dtype)
