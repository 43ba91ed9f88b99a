"""One engine op for a bucket's fused update, for the optimizers the
core implements (src/optim/): the same float32 arithmetic as MXNet's ops, one
vectorised pass per parameter over its weight and its slice of the bucket's
flat gradient and states. Mirrors what each
mxnet.optimizer class computes before it calls its op (update counts,
lr/wd multipliers, Adam's bias correction)."""
import math

import numpy as np


def _clip(value):
    return value if value else None  # the Python optimizers treat 0/None as "no clipping"


def _sgd(opt, lr, wd, state):
    params = {"lr": lr, "wd": wd, "rescale_grad": opt.rescale_grad, "clip_gradient": _clip(opt.clip_gradient)}
    if opt.momentum > 0 and state is not None:
        return "sgd_mom", [state], dict(params, momentum=opt.momentum)
    return "sgd", [], params


def _nag(opt, lr, wd, state):
    kind, states, params = _sgd(opt, lr, wd, state)
    return ("nag_mom" if kind == "sgd_mom" else kind), states, params


def _adam(opt, lr, wd, state, t):
    lr *= math.sqrt(1.0 - opt.beta2 ** t) / (1.0 - opt.beta1 ** t)
    return "adam", list(state), {"lr": lr, "wd": wd, "beta1": opt.beta1, "beta2": opt.beta2,
                                 "epsilon": opt.epsilon, "rescale_grad": opt.rescale_grad,
                                 "clip_gradient": _clip(opt.clip_gradient)}


def _rmsprop(opt, lr, wd, state):
    params = {"lr": lr, "wd": wd, "gamma1": opt.gamma1, "epsilon": opt.epsilon,
              "rescale_grad": opt.rescale_grad, "clip_gradient": _clip(opt.clip_gradient),
              "clip_weights": _clip(opt.clip_weights)}
    if opt.centered:
        return "rmspropalex", list(state), dict(params, gamma2=opt.gamma2)
    return "rmsprop", list(state), params


def _adagrad(opt, lr, wd, state):
    return "adagrad", [state], {"lr": lr, "wd": wd, "epsilon": opt.float_stable_eps,
                                "rescale_grad": opt.rescale_grad, "clip_gradient": opt.clip_gradient}


def _lamb(opt, lr, wd, state, t):
    # per-tensor norms: the core runs the kernel once per parameter (segment)
    return "lamb", list(state), {"lr": lr, "wd": wd, "beta1": opt.beta1, "beta2": opt.beta2,
                                 "epsilon": opt.epsilon, "t": t, "bias_correction": opt.bias_correction,
                                 "rescale_grad": opt.rescale_grad, "clip_gradient": _clip(opt.clip_gradient),
                                 "lower_bound": _clip(opt.lower_bound), "upper_bound": _clip(opt.upper_bound)}


_SUPPORTED = {"sgd": _sgd, "ccsgd": _sgd, "nag": _nag, "adam": _adam, "rmsprop": _rmsprop, "adagrad": _adagrad,
              "lamb": _lamb}


def has_kernel(optimizer):
    return type(optimizer).__name__.lower() in _SUPPORTED


def supports(optimizer, bucket):
    """float32 host buckets of the optimizers above (lazy_update only matters
    for sparse gradients, which never sit in a bucket). The kernels run on
    host memory: buckets on a GPU are updated by MXNet's own ops."""
    return (has_kernel(optimizer) and np.dtype(bucket.grad.dtype) == np.float32
            and bucket.ctx.device_type != "gpu")


def _kernel_call(optimizer, indices, state):
    """(kind, states, params) of one fused update of the parameters
    `indices` (one group: the first one's settings hold for all)."""
    name = type(optimizer).__name__.lower()
    index = indices[0]
    # Count every member (Adam's and LAMB's step t is per parameter, and a
    # later per-parameter update or a checkpoint must see the right count).
    optimizer._update_count(list(indices))
    lr, wd = optimizer._get_lr(index), optimizer._get_wd(index)
    if name in ("adam", "lamb"):
        handler = _adam if name == "adam" else _lamb
        return handler(optimizer, lr, wd, state, optimizer._index_update_count[index])
    return _SUPPORTED[name](optimizer, lr, wd, state)


def update(optimizer, bucket, core_module):
    """Runs the optimizer's update of the whole bucket as one core kernel."""
    kind, states, params = _kernel_call(optimizer, [i for i, _ in bucket.entries], bucket.state)
    core_module.fused_update_multi(kind, bucket.weights, bucket.grad, states, params, bucket.segments)


def update_flat(optimizer, indices, weight, grad, state, core_module):
    """One core kernel over flat float32 `weight`, `grad` and `state` that
    hold parts of the parameters `indices` (a slice of a bucket, element-wise
    optimizers only)."""
    kind, states, params = _kernel_call(optimizer, indices, state)
    core_module.fused_update(kind, weight, grad, states, params)
