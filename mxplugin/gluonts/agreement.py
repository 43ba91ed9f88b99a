"""What the ranks of a GluonTS training job must agree on, and the small
collectives that make them agree: settings checked once, per-rank totals
summed, stop votes joined, parameters made equal."""
import mxnet as mx
import numpy as np

from mxplugin import functions
from mxplugin.errors import MismatchError, values_by_rank
from mxplugin.functions import RankTotals, allgather_object, first_parameter_difference
from mxplugin.ops import Max, allreduce


def check_same_everywhere(what, values, name):
    """Raises MismatchError on every rank, naming the first entry of the
    dict `values` that differs between ranks and each rank's value of it.
    One allgather: every rank sees every rank's values, so all raise alike."""
    everyone = allgather_object(values, name=name)
    ranks = list(range(len(everyone)))
    for key in values:
        theirs = [v.get(key, "<missing>") for v in everyone]
        detail = values_by_rank(ranks, [repr(t) for t in theirs], [f"{key}={t!r}" for t in theirs])
        if detail:
            raise MismatchError(f"{what}: '{key}' differs across ranks: {detail}. Every rank must run the same "
                                "training script with the same arguments.")
    extra = sorted({k for v in everyone for k in v} - set(values))
    if extra:
        raise MismatchError(f"{what}: ranks disagree on what was checked ({', '.join(extra)}); every rank must "
                            "run the same version of the training script.")


def parameter_signature(params):
    """(name, shape, dtype) of each parameter in the network's own order."""
    return [(p.name, tuple(p.shape), str(np.dtype(p.dtype))) for p in params.values()]


def check_parameters_agree(params, name):
    """MismatchError on every rank when the networks differ (position by
    position: names carry per-process counters and may differ harmlessly)."""
    difference = first_parameter_difference(parameter_signature(params), name, "no parameter")
    if difference:
        i, detail = difference
        raise MismatchError(f"mxplugin.gluonts.Trainer: the training networks differ across ranks; the first "
                            f"difference, parameter {i}: {detail}. Every rank must build the same estimator.")


def broadcast_parameters(params, name, root_rank=0):
    """root_rank's values of every (initialised) parameter on every context,
    in place, named by position so that ranks whose block names differ still
    agree (mxplugin.broadcast_parameters names them by key); waits for them."""
    by_position = {f"{i}.{j}": data for i, p in enumerate(params.values()) for j, data in enumerate(p.list_data())}
    functions.broadcast_parameters(by_position, root_rank, prefix=name + ".")
    mx.nd.waitall()


def make_parameters_identical(params, name):
    """Broadcasts rank 0's parameters and returns the largest absolute
    difference any rank had from them before (0.0 when training kept every
    rank's parameters bit for bit equal, as it should)."""
    before = [d.copy() for p in params.values() for d in p.list_data()]
    broadcast_parameters(params, name)
    after = [d for p in params.values() for d in p.list_data()]
    local = max((float(mx.nd.max(mx.nd.abs(a - b)).asscalar()) for a, b in zip(after, before) if a.size), default=0.0)
    return float(allreduce(mx.nd.array([local], dtype="float64"), op=Max, name=name + ".drift").asscalar())


def everyone_agrees(flag, name):
    """True on every rank when `flag` is true on every rank."""
    return RankTotals(name, ("no",)).sum(no=0.0 if flag else 1.0)["no"] == 0
