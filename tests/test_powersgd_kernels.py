"""PowerSGD's passes in the core (mxplugin._core.powersgd_stage and
powersgd_stage_raw) against the same steps in float64 NumPy, and the
trainer's reduction through them against the one through MXNet's operators.

Single process, no Core needed for the kernels; the reducer's comparison
runs in one rank of an in-process world (a sum over one rank)."""
import numpy as np
import pytest

import mxnet as mx
from mxplugin._loader import core_module as core

# (m, n, rank): both orientations (m <= n and m > n), sizes that are not a
# multiple of the vector width, rank 1 up to all rows, more than one chunk
# of factors (rank > 4) and a rest of 1-3.
SHAPES = [(3, 5, 2), (5, 3, 2), (1, 1, 1), (7, 7, 7), (17, 1, 1), (64, 301, 4), (301, 64, 4), (40, 1000, 8),
          (1000, 40, 6), (33, 97, 5), (128, 4608, 3)]
TOLERANCE = 1e-5


def _case(m, n, rank, seed):
    rng = np.random.RandomState(seed)
    rows, cols = min(m, n), max(m, n)
    return {"grad": rng.standard_normal((m, n)).astype(np.float32),
            "error": rng.standard_normal((m, n)).astype(np.float32),
            "p": np.zeros((rank, rows), np.float32),
            "q": rng.standard_normal((rank, cols)).astype(np.float32)}


def _orthonormal_rows(p):
    return np.linalg.qr(p.T.astype(np.float64))[0].T.astype(np.float32)


def _relative(ours, ref):
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))


def _stages(run, m, n, rank, arrays):
    """Runs the three stages with `run(stage, arrays)`, orthonormalising P in
    between as the reducer does; returns the arrays after each stage."""
    after = []
    run(core.POWERSGD_ACCUMULATE, arrays)
    after.append({k: v.copy() for k, v in arrays.items()})
    arrays["p"][:] = _orthonormal_rows(arrays["p"])
    run(core.POWERSGD_RESIDUAL, arrays)
    after.append({k: v.copy() for k, v in arrays.items()})
    run(core.POWERSGD_RECONSTRUCT, arrays)
    after.append({k: v.copy() for k, v in arrays.items()})
    return after


def _raw(m, n, rank):
    return lambda stage, a: core.powersgd_stage_raw(stage, [(a["grad"], a["error"], a["p"], a["q"], (m, n), rank)])


@pytest.mark.parametrize("m,n,rank", SHAPES)
def test_each_stage_computes_the_step_it_stands_for(m, n, rank):
    arrays = _case(m, n, rank, seed=m * 1000 + n)
    grad, error, q = (arrays[k].astype(np.float64) for k in ("grad", "error", "q"))
    accumulated, residual, reconstructed = _stages(_raw(m, n, rank), m, n, rank, arrays)

    error = error + grad
    a = error if m <= n else error.T
    assert _relative(accumulated["error"], error) < TOLERANCE
    assert _relative(accumulated["p"], q @ a.T) < TOLERANCE

    p_hat = residual["p"].astype(np.float64)
    q_new = p_hat @ a
    left = a - p_hat.T @ q_new
    assert _relative(residual["q"], q_new) < TOLERANCE
    # the residual is a difference of nearly equal terms: measured against the error's scale
    assert np.abs(residual["error"] - (left if m <= n else left.T)).max() < TOLERANCE * np.abs(error).max()

    product = p_hat.T @ residual["q"].astype(np.float64)
    assert _relative(reconstructed["grad"], product if m <= n else product.T) < TOLERANCE


@pytest.mark.parametrize("m,n,rank", [(64, 301, 4), (301, 64, 5)])
def test_the_engine_op_gives_the_raw_pass_bits(m, n, rank):
    """One build's passes give the same bits through MXNet's engine as called
    directly, and the same bits every run."""
    raw = _stages(_raw(m, n, rank), m, n, rank, _case(m, n, rank, seed=7))
    again = _stages(_raw(m, n, rank), m, n, rank, _case(m, n, rank, seed=7))

    def pushed(stage, a):
        nd = {k: mx.nd.array(v, dtype="float32") for k, v in a.items()}
        core.powersgd_stage(stage, [(nd["grad"], nd["error"], nd["p"], nd["q"], (m, n), rank)])
        for k in a:
            a[k][:] = nd[k].asnumpy()
    engine = _stages(pushed, m, n, rank, _case(m, n, rank, seed=7))
    for stage in range(3):
        for k in ("grad", "error", "p", "q"):
            assert np.array_equal(raw[stage][k], again[stage][k]), (stage, k)
            assert np.array_equal(raw[stage][k], engine[stage][k]), (stage, k)


def test_gradients_that_are_views_of_one_bucket_are_one_stage():
    bucket = mx.nd.array(np.arange(2 * 12, dtype=np.float32) / 10)
    views = [bucket[0:12].reshape((3, 4)), bucket[12:24].reshape((4, 3))]
    expected = bucket.asnumpy().copy()
    matrices = []
    for view in views:
        m, n = view.shape
        matrices.append((view, mx.nd.zeros((m, n)), mx.nd.zeros((2, min(m, n))), mx.nd.ones((2, max(m, n))), (m, n),
                         2))
    core.powersgd_stage(core.POWERSGD_ACCUMULATE, matrices)
    assert np.array_equal(np.concatenate([e.asnumpy().ravel() for _, e, *_ in matrices]), expected)
    core.powersgd_stage(core.POWERSGD_RECONSTRUCT, matrices)  # writes both views of the bucket
    assert np.isfinite(bucket.asnumpy()).all()


@pytest.mark.parametrize("change,message", [
    (lambda a: dict(a, error=mx.nd.zeros((3, 4), dtype="float16")), "error buffer has dtype float16"),
    (lambda a: dict(a, q=mx.nd.zeros((2, 6))), "Q has 12 elements, the matrix needs 10"),
    (lambda a: dict(a, rank=6), "rank 6 is not in [1, 3]"),
    (lambda a: dict(a, p=a["error"].reshape((15,))[9:15].reshape((2, 3))), "overlaps another array"),
])
def test_bad_arguments_are_refused_before_anything_runs(change, message):
    arrays = change({"grad": mx.nd.ones((3, 5)), "error": mx.nd.zeros((3, 5)), "p": mx.nd.zeros((2, 3)),
                     "q": mx.nd.ones((2, 5)), "rank": 2})
    with pytest.raises(Exception, match=message.replace("[", r"\[").replace("]", r"\]")):
        core.powersgd_stage(core.POWERSGD_ACCUMULATE, [(arrays["grad"], arrays["error"], arrays["p"], arrays["q"],
                                                        (3, 5), arrays["rank"])])


def test_the_reducer_gives_what_mxnet_operators_give(monkeypatch):
    """The trainer's PowerSGD reduction of a few gradients through the
    core's passes and through MXNet's operators, over two steps (error
    feedback and a warm-started Q), agree to float tolerance."""
    import mxplugin as hvd
    from mxplugin.training.powersgd import Factors, PowerSGDReducer

    hvd.init()
    shapes = [(16, 3, 3, 3), (64, 8), (8, 64), (10, 10)]
    rng = np.random.RandomState(3)
    steps = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(2)]

    def run(in_core):
        monkeypatch.setattr(Factors, "runs_in_core", lambda self, grad: in_core)
        reducer = PowerSGDReducer(hvd.Compression.powersgd(rank=3), f"kernels{int(in_core)}.")
        results = []
        for grads in steps:
            arrays = [mx.nd.array(g) for g in grads]
            reducer.reduce(list(enumerate(arrays)), hvd.global_process_set)
            results.append([a.asnumpy() for a in arrays] + [f.error.asnumpy() for f in reducer.factors.values()])
        return results

    for ours, theirs in zip(run(True), run(False)):
        for a, b in zip(ours, theirs):
            assert np.abs(a - b).max() <= 1e-4 * max(np.abs(b).max(), 1.0)
