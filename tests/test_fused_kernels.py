"""Fused optimizer kernels (mxplugin._core.fused_update / fused_update_raw)
against MXNet 1.9.1's own optimizer ops and Python optimizers.

Single process, no Core (the kernels do not need init()). Every case runs a
few steps on float32 buffers of odd sizes, with hyper-parameters chosen so
that each term of the update matters (large epsilon, weight decay,
rescale_grad != 1, clipping that bites), and compares weight and states after
every step.
"""
import numpy as np
import pytest

import mxnet as mx
from mxplugin._loader import core_module as core

N = 10007
STEPS = 4
TOLERANCE = 1e-5
# LAMB tensors laid out back to back (sum N).
SEGMENT_SIZES = [1, 7, 1001, 33, 5003, 3962]
OFFSETS = np.concatenate([[0], np.cumsum(SEGMENT_SIZES)]).astype(np.int64)

BASE = dict(wd=0.05, rescale_grad=0.37)
PARAMS = {
    "sgd": dict(BASE, lr=0.1),
    "sgd_mom": dict(BASE, lr=0.1, momentum=0.9),
    "nag_mom": dict(BASE, lr=0.1, momentum=0.9),
    "adam": dict(BASE, lr=0.01, beta1=0.8, beta2=0.95, epsilon=0.1),
    "rmsprop": dict(BASE, lr=0.01, gamma1=0.8, epsilon=0.1),
    "rmspropalex": dict(BASE, lr=0.01, gamma1=0.8, gamma2=0.7, epsilon=0.1),
    "adagrad": dict(BASE, lr=0.1, epsilon=0.1),
    "lamb": dict(BASE, lr=0.01, beta1=0.8, beta2=0.95, epsilon=0.1, bias_correction=True),
}
CLIP_GRADIENT = 0.2  # rescaled grads are ~N(0, 0.74): most get clipped
CLIP_WEIGHTS = 0.9


def rel_diff(ours, ref):
    """max |ours - ref| / |ref| elementwise; elements a thousand times smaller
    than the largest are measured against that floor (cancellation)."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    floor = 1e-3 * max(np.max(np.abs(ref)), 1e-30)
    return float(np.max(np.abs(ours - ref) / np.maximum(np.abs(ref), floor)))


def tensorwise_rel_diff(ours, ref):
    """max over LAMB tensors of ||ours - ref||_inf / ||ref||_inf."""
    out = 0.0
    for a, b in zip(OFFSETS[:-1], OFFSETS[1:]):
        o, r = np.asarray(ours[a:b], np.float64), np.asarray(ref[a:b], np.float64)
        out = max(out, float(np.max(np.abs(o - r)) / max(np.max(np.abs(r)), 1e-30)))
    return out


def initial_states(kind, rng):
    def normal(scale):
        return (rng.standard_normal(N) * scale).astype(np.float32)

    def positive(scale):
        return np.abs(normal(scale))

    if kind in ("sgd_mom", "nag_mom"):
        return [normal(0.1)]
    if kind in ("adam", "lamb"):
        return [normal(0.1), positive(0.1)]
    if kind in ("rmsprop", "adagrad"):
        return [positive(0.1)]
    if kind == "rmspropalex":
        g = normal(0.1)
        return [positive(0.1) + g * g, g, normal(0.1)]
    return []


def with_clipping(kind, params, clip):
    params = dict(params)
    if clip:
        params["clip_gradient"] = CLIP_GRADIENT
        if kind.startswith("rmsprop"):
            params["clip_weights"] = CLIP_WEIGHTS
    return params


def mxnet_reference(kind, weight, grad, states, params):
    """One step of MXNet's own update, in place on NDArrays, called the way
    mxnet.optimizer calls it (out=weight)."""
    p = {k: (-1.0 if v is None else v) for k, v in params.items()}
    if kind == "sgd":
        mx.nd.sgd_update(weight, grad, out=weight, **p)
    elif kind == "sgd_mom":
        mx.nd.sgd_mom_update(weight, grad, states[0], out=weight, **p)
    elif kind == "nag_mom":
        mx.nd.nag_mom_update(weight, grad, states[0], out=weight, **p)
    elif kind == "adam":
        mx.nd.adam_update(weight, grad, states[0], states[1], out=weight, **p)
    elif kind == "rmsprop":
        mx.nd.rmsprop_update(weight, grad, states[0], out=weight, **p)
    elif kind == "rmspropalex":
        mx.nd.rmspropalex_update(weight, grad, states[0], states[1], states[2], out=weight, **p)
    elif kind == "adagrad":
        # Dense AdaGrad is NDArray arithmetic in mxnet.optimizer.AdaGrad.update.
        clip = p.get("clip_gradient", -1.0)
        opt = mx.optimizer.AdaGrad(learning_rate=p["lr"], wd=p["wd"], rescale_grad=p["rescale_grad"],
                                   clip_gradient=clip if clip >= 0 else None, eps=p["epsilon"])
        opt.update(0, weight, grad, states[0])
    elif kind == "lamb":
        phase2 = {k: p.pop(k) for k in ("lr", "lower_bound", "upper_bound") if k in p}
        for a, b in zip(OFFSETS[:-1], OFFSETS[1:]):
            w, mean, var = weight[a:b], states[0][a:b], states[1][a:b]
            g = mx.nd.lamb_update_phase1(w, grad[a:b], mean, var, **p)
            mx.nd.lamb_update_phase2(w, g, w.norm(), g.norm(), out=w, **phase2)
    else:
        raise AssertionError(kind)


def fused(entry, kind, weight, grad, states, params, segments=None):
    """Runs our update on NumPy arrays in place, through either entry."""
    if entry == "raw":
        core.fused_update_raw(kind, weight, grad, states, params, segments=segments)
        return
    w, g, s = mx.nd.array(weight), mx.nd.array(grad), [mx.nd.array(x) for x in states]
    core.fused_update(kind, w, g, s, params, segments=segments)
    weight[:] = w.asnumpy()
    for dst, src in zip(states, s):
        dst[:] = src.asnumpy()


def run_against_mxnet(entry, kind, params, seed, weight_diff=rel_diff):
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal(N).astype(np.float32)
    states = initial_states(kind, rng)
    ref_w, ref_s = mx.nd.array(weight), [mx.nd.array(s) for s in states]
    segments = OFFSETS if kind == "lamb" else None
    for step in range(1, STEPS + 1):
        grad = (rng.standard_normal(N) * 2).astype(np.float32)
        step_params = dict(params, t=step) if kind == "lamb" else params
        mxnet_reference(kind, ref_w, mx.nd.array(grad), ref_s, step_params)
        fused(entry, kind, weight, grad, states, step_params, segments)
        diff = weight_diff(weight, ref_w.asnumpy())
        assert diff <= TOLERANCE, f"{kind} step {step}: weight differs by {diff:.3g}"
        for i, (ours, ref) in enumerate(zip(states, ref_s)):
            diff = rel_diff(ours, ref.asnumpy())
            assert diff <= TOLERANCE, f"{kind} step {step}: state {i} differs by {diff:.3g}"


@pytest.mark.parametrize("entry", ["raw", "ndarray"])
@pytest.mark.parametrize("clip", [False, True], ids=["noclip", "clip"])
@pytest.mark.parametrize("kind", [k for k in PARAMS if k != "lamb"])
def test_elementwise_matches_mxnet(kind, clip, entry):
    seed = 2 * list(PARAMS).index(kind) + clip
    run_against_mxnet(entry, kind, with_clipping(kind, PARAMS[kind], clip), seed=seed)


@pytest.mark.parametrize("entry", ["raw", "ndarray"])
@pytest.mark.parametrize("clip", [False, True], ids=["noclip", "clip"])
@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("bounds", [(None, None), (0.5, 20.0)], ids=["nobounds", "bounds"])
def test_lamb_matches_mxnet(bounds, bias_correction, clip, entry):
    # r1 and r2 are per-tensor scalars; MXNet sums them in float32, we in
    # double, so the weights agree tensor by tensor to the norms' rounding
    # (mean and var, which do not use the norms, are compared elementwise).
    # Weight norms here are ~30-70: the upper bound 20 binds.
    params = dict(with_clipping("lamb", PARAMS["lamb"], clip), bias_correction=bias_correction,
                  lower_bound=bounds[0], upper_bound=bounds[1])
    run_against_mxnet(entry, "lamb", params, seed=7 + clip + 2 * bias_correction, weight_diff=tensorwise_rel_diff)


@pytest.mark.parametrize("entry", ["raw", "ndarray"])
@pytest.mark.parametrize("clip", [False, True], ids=["noclip", "clip"])
def test_lamb_elementwise_math_matches_mxnet(clip, entry):
    # lower_bound = upper_bound = 0 turns r1 into 0, so phase 2 uses lr as is:
    # what is left is the element-wise math, compared elementwise.
    params = dict(with_clipping("lamb", PARAMS["lamb"], clip), lower_bound=0.0, upper_bound=0.0, lr=0.5)
    run_against_mxnet(entry, "lamb", params, seed=11 + clip)


def python_optimizer_case(name):
    """(mxnet.optimizer instance, kind, params for step t) for one optimizer."""
    common = dict(wd=0.05, rescale_grad=0.37, clip_gradient=CLIP_GRADIENT)
    if name == "nag":
        return mx.optimizer.NAG(learning_rate=0.1, momentum=0.9, **common), "nag_mom", \
            lambda t: dict(common, lr=0.1, momentum=0.9)
    if name == "adam":
        # mxnet.optimizer.Adam folds bias correction into lr; so must the caller.
        b1, b2 = 0.8, 0.95
        return mx.optimizer.Adam(learning_rate=0.01, beta1=b1, beta2=b2, epsilon=0.1, **common), "adam", \
            lambda t: dict(common, lr=0.01 * np.sqrt(1 - b2 ** t) / (1 - b1 ** t), beta1=b1, beta2=b2, epsilon=0.1)
    if name == "rmsprop_centered":
        return mx.optimizer.RMSProp(learning_rate=0.01, gamma1=0.8, gamma2=0.7, epsilon=0.1, centered=True,
                                    clip_weights=CLIP_WEIGHTS, **common), "rmspropalex", \
            lambda t: dict(common, lr=0.01, gamma1=0.8, gamma2=0.7, epsilon=0.1, clip_weights=CLIP_WEIGHTS)
    if name == "lamb":
        return mx.optimizer.LAMB(learning_rate=0.01, beta1=0.8, beta2=0.95, epsilon=0.1, upper_bound=20.0,
                                 **common), "lamb", \
            lambda t: dict(common, lr=0.01, beta1=0.8, beta2=0.95, epsilon=0.1, upper_bound=20.0, t=t)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["nag", "adam", "rmsprop_centered", "lamb"])
def test_matches_python_optimizer(name):
    """The trainer-facing contract: same steps as mxnet.optimizer's update()."""
    opt, kind, params_at = python_optimizer_case(name)
    rng = np.random.default_rng(3)
    weight = rng.standard_normal(N).astype(np.float32)
    states = initial_states(kind, rng)
    segments = OFFSETS if kind == "lamb" else None
    bounds = [(0, N)] if segments is None else list(zip(OFFSETS[:-1], OFFSETS[1:]))
    # One mxnet.optimizer index per tensor (LAMB: per segment).
    ref_w = [mx.nd.array(weight[a:b]) for a, b in bounds]
    ref_s = [[mx.nd.array(s[a:b]) for s in states] for a, b in bounds]
    for t in range(1, STEPS + 1):
        grad = (rng.standard_normal(N) * 2).astype(np.float32)
        for i, (a, b) in enumerate(bounds):
            state = ref_s[i][0] if len(ref_s[i]) == 1 else tuple(ref_s[i])
            opt.update(i, ref_w[i], mx.nd.array(grad[a:b]), state)
        core.fused_update_raw(kind, weight, grad, states, params_at(t), segments=segments)
        ref = np.concatenate([w.asnumpy() for w in ref_w])
        diff = (tensorwise_rel_diff if kind == "lamb" else rel_diff)(weight, ref)
        assert diff <= TOLERANCE, f"{name} step {t}: weight differs by {diff:.3g}"
        for j in range(len(states)):
            diff = rel_diff(states[j], np.concatenate([s[j].asnumpy() for s in ref_s]))
            assert diff <= TOLERANCE, f"{name} step {t}: state {j} differs by {diff:.3g}"


def test_sgd_momentum_matches_python_sgd():
    # mxnet.optimizer.SGD runs multi_sgd_mom_update, which groups the same
    # math differently (weight decay added to the grad first): equal to
    # rounding, so compared tensor-wise.
    opt = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.05, rescale_grad=0.37)
    rng = np.random.default_rng(5)
    weight = rng.standard_normal(N).astype(np.float32)
    mom = np.zeros(N, np.float32)
    ref_w, ref_m = mx.nd.array(weight), mx.nd.zeros(N)
    for step in range(STEPS):
        grad = (rng.standard_normal(N) * 2).astype(np.float32)
        opt.update([0], [ref_w], [mx.nd.array(grad)], [ref_m])
        core.fused_update_raw("sgd_mom", weight, grad, [mom], dict(lr=0.1, momentum=0.9, wd=0.05, rescale_grad=0.37))
        assert np.max(np.abs(weight - ref_w.asnumpy())) <= TOLERANCE * np.max(np.abs(weight))
        assert np.max(np.abs(mom - ref_m.asnumpy())) <= TOLERANCE * np.max(np.abs(mom))


def test_ndarray_entry_waits_for_grad_and_orders_readers():
    # grad is the output of ops still pending when the update is pushed (a
    # chain of 2M-value ops); the update must wait for them, and readers of
    # weight and mom must wait for it.
    n = 1 << 21
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal(n).astype(np.float32)
    weight, mom = mx.nd.array(w0), mx.nd.zeros(n)
    mx.nd.waitall()
    grad = mx.nd.array(rng.standard_normal(n).astype(np.float32))
    for _ in range(20):
        grad = grad * 1.01 + 0.5
    params = dict(lr=0.1, momentum=0.9, wd=0.05)
    core.fused_update("sgd_mom", weight, grad, [mom], params)
    weight_after, mom_after = weight * 1.0, mom * 1.0
    w, m = w0.copy(), np.zeros(n, np.float32)
    core.fused_update_raw("sgd_mom", w, grad.asnumpy(), [m], params)
    np.testing.assert_array_equal(weight_after.asnumpy(), w)
    np.testing.assert_array_equal(mom_after.asnumpy(), m)


def test_ndarray_entry_handles_onednn_layouts():
    # After an inference convolution, oneDNN keeps the weight in a blocked
    # layout (Note [oneDNN layouts] in src/mxnet/engine_op.cc).
    rng = np.random.default_rng(13)
    shape = (64, 32, 3, 3)
    weight = mx.nd.array(rng.standard_normal(shape).astype(np.float32))
    grad = mx.nd.array(rng.standard_normal(shape).astype(np.float32))
    x = mx.nd.array(rng.standard_normal((2, 32, 14, 14)).astype(np.float32))
    for array in (weight, grad):
        mx.nd.Convolution(x, array, kernel=(3, 3), num_filter=64, no_bias=True).wait_to_read()
    w, g = weight.asnumpy(), grad.asnumpy()
    mom_np = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    mom = mx.nd.array(mom_np)
    params = dict(lr=0.1, momentum=0.9, wd=0.05, clip_gradient=0.5)
    core.fused_update("sgd_mom", weight, grad, [mom], params)
    core.fused_update_raw("sgd_mom", w, g, [mom_np], params)
    np.testing.assert_array_equal(weight.asnumpy(), w)
    np.testing.assert_array_equal(mom.asnumpy(), mom_np)
    # and the array is still a working convolution weight
    mx.nd.Convolution(x, weight, kernel=(3, 3), num_filter=64, no_bias=True).wait_to_read()


def test_segments_do_not_change_elementwise_updates():
    rng = np.random.default_rng(17)
    w1 = rng.standard_normal(N).astype(np.float32)
    g = rng.standard_normal(N).astype(np.float32)
    w2, m1, m2 = w1.copy(), np.zeros(N, np.float32), np.zeros(N, np.float32)
    core.fused_update_raw("sgd_mom", w1, g, [m1], PARAMS["sgd_mom"])
    core.fused_update_raw("sgd_mom", w2, g, [m2], PARAMS["sgd_mom"], segments=OFFSETS)
    np.testing.assert_array_equal(w1, w2)


def test_empty_buffers_are_a_no_op():
    empty = np.zeros(0, np.float32)
    core.fused_update_raw("adam", empty, empty.copy(), [empty.copy(), empty.copy()], dict(lr=0.1))


def test_num_states():
    assert {k: core.fused_num_states(k) for k in core.FUSED_KINDS} == {
        "sgd": 0, "sgd_mom": 1, "nag_mom": 1, "adam": 2, "rmsprop": 1, "rmspropalex": 3, "adagrad": 1, "lamb": 2}


def arrays(n=16, count=3):
    return [np.zeros(n, np.float32) for _ in range(count)]


@pytest.mark.parametrize("call, error, match", [
    (lambda w, g, s: core.fused_update_raw("adamw", w, g, [s], dict(lr=0.1)), ValueError, "unknown fused optimizer"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(momentum=0.9)), ValueError, "needs lr"),
    (lambda w, g, s: core.fused_update_raw("lamb", w, g, [s, s.copy()], dict(lr=0.1)), ValueError, "needs t"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(lr=0.1, beta1=0.9)), ValueError,
     "has no parameter 'beta1'; it takes lr, wd, rescale_grad, clip_gradient, momentum"),
    (lambda w, g, s: core.fused_update_raw("lamb", w, g, [s, s.copy()], dict(lr=0.1, t=1.5)), ValueError,
     "must be an integer"),
    (lambda w, g, s: core.fused_update_raw("lamb", w, g, [s, s.copy()], dict(lr=0.1, t=0)), ValueError, "t .* >= 1"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(lr="fast")), TypeError, "must be a number"),
    (lambda w, g, s: core.fused_update_raw("adam", w, g, [s], dict(lr=0.1)), ValueError,
     r"takes 2 state buffer\(s\) \(mean, var\), got 1"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g[:8], [s], dict(lr=0.1)), ValueError,
     "grad has 8 elements but weight has 16"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w.astype(np.float64), g, [s], dict(lr=0.1)), TypeError,
     "float32 only"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", np.zeros((4, 8), np.float32)[:, ::2], g, [s], dict(lr=0.1)),
     ValueError, "not C-contiguous"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [w], dict(lr=0.1)), ValueError,
     "weight and state 0 overlap"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(lr=0.1), segments=[1, 16]), ValueError,
     "first segment offset is 1"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(lr=0.1), segments=[0, 9, 4, 16]), ValueError,
     "decrease"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, [s], dict(lr=0.1), segments=[0, 15]), ValueError,
     "last segment offset is 15 but the buffers hold 16"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", w, g, s, dict(lr=0.1)), TypeError, "list or tuple"),
    (lambda w, g, s: core.fused_update_raw("sgd_mom", mx.nd.array(w), g, [s], dict(lr=0.1)), TypeError,
     "numpy.ndarray"),
])
def test_raw_argument_errors(call, error, match):
    w, g, s = arrays()
    with pytest.raises(error, match=match):
        call(w, g, s)


def test_raw_rejects_read_only_weight():
    w, g, s = arrays()
    w.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        core.fused_update_raw("sgd_mom", w, g, [s], dict(lr=0.1))


@pytest.mark.parametrize("make, error, match", [
    (lambda: (mx.nd.zeros(16, dtype="float16"), mx.nd.zeros(16), [mx.nd.zeros(16)]), ValueError,
     "weight has dtype float16; fused updates take float32 only"),
    (lambda: (mx.nd.zeros(16), mx.nd.zeros(16).tostype("row_sparse"), [mx.nd.zeros(16)]), ValueError,
     "grad has sparse storage"),
    (lambda: (mx.nd.zeros(16), mx.nd.zeros(15), [mx.nd.zeros(16)]), ValueError,
     "grad has 15 elements but weight has 16"),
    (lambda: (lambda w: (w, mx.nd.zeros(16), [w]))(mx.nd.zeros(16)), ValueError,
     "weight and state 0 are the same NDArray"),
    (lambda: (lambda b: (b[:16], mx.nd.zeros(16), [b[16:]]))(mx.nd.zeros(32)), ValueError, "views of one"),
    (lambda: (mx.nd.zeros(16), mx.nd.zeros(16), []), ValueError, r"takes 1 state buffer\(s\) \(mom\), got 0"),
    (lambda: (np.zeros(16, np.float32), mx.nd.zeros(16), [mx.nd.zeros(16)]), TypeError,
     "weight must be an mxnet NDArray"),
])
def test_ndarray_argument_errors(make, error, match):
    weight, grad, states = make()
    with pytest.raises(error, match=match):
        core.fused_update("sgd_mom", weight, grad, states, dict(lr=0.1))
