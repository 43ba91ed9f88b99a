"""DistributedTrainer: gluon.Trainer whose gradients are averaged across ranks
by the core (fused, scaled on the fused buffer) before each update."""
from collections import OrderedDict

import mxnet as mx

from mxplugin import basics
from mxplugin.compression import Compression
from mxplugin.ops import Average, grouped_allreduce_


class DistributedTrainer(mx.gluon.Trainer):
    """Drop-in for gluon.Trainer (horovod.mxnet signature).

    gradient_predivide_factor f: gradients are scaled by 1/f before the sum
    and by f/size after it, both on the fused buffer in the core."""

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=basics.global_process_set):
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError("prefix must be a str or None")
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be positive")
        if isinstance(params, dict):
            params = OrderedDict(params)
        elif isinstance(params, (list, tuple)):
            params = sorted(params, key=lambda p: p.name)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._predivide = float(gradient_predivide_factor)
        self._prefix = prefix or ""
        self._num_groups = num_groups
        self._process_set = process_set

    def _allreduce_grads(self):
        if not self._process_set.included() or self._process_set.size() == 1:
            return
        by_dtype = OrderedDict()
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            grad = param.list_grad()[0]
            sent, ctx = self._compression.compress(grad)
            by_dtype.setdefault(str(sent.dtype), []).append((i, grad, sent, ctx))
        for dtype, items in by_dtype.items():
            grouped_allreduce_([sent for _, _, sent, _ in items], name=f"{self._prefix}grads.{dtype}",
                               op=Average, prescale_factor=1.0 / self._predivide,
                               postscale_factor=self._predivide, process_set=self._process_set)
            if self._compression is not Compression.none:
                for _, grad, sent, ctx in items:
                    grad[:] = self._compression.decompress(sent, ctx)
