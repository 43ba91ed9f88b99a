"""DistributedOptimizer: horovod.mxnet's optimizer wrapper, which averages
each gradient across ranks before the wrapped optimizer's update (for the
Module API and custom loops; DistributedTrainer reduces gradients itself)."""
import mxnet as mx

from mxplugin import basics
from mxplugin.errors import ArgumentError
from mxplugin.ops import Average, allreduce_, grouped_allreduce_
from mxplugin.training import accumulation, sparse_rows


def _parts(items, n):
    """`items` cut into min(n, len) consecutive parts whose sizes differ by at most one."""
    n = min(n, len(items))
    size, extra = divmod(len(items), n)
    bounds = [k * size + min(k, extra) for k in range(n + 1)]
    return [items[bounds[k]:bounds[k + 1]] for k in range(n)]


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an optimizer so each update first averages its gradient across
    ranks (horovod.mxnet semantics; for the Module API and custom loops).
    num_groups > 0: an update of several indices at once (MXNet's updater
    passes lists when the optimizer aggregates) reduces them in that many
    grouped allreduces instead of one allreduce each.
    backward_passes_per_step K (Horovod's name): of every K updates of an
    index, K-1 only add its gradient up locally; the K-th reduces the sum
    once and updates as one process on the combined batch of the K passes
    (passes of equal batch sizes: rescale_grad is divided by K; Note
    [Accumulated passes] in accumulation.py)."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=basics.global_process_set, backward_passes_per_step=1):
        if not gradient_predivide_factor > 0:
            raise ArgumentError("gradient_predivide_factor must be positive")
        self._optimizer = optimizer
        self._predivide = float(gradient_predivide_factor)
        self._num_groups = num_groups
        self._process_set = process_set
        self._passes = accumulation.passes_per_step(backward_passes_per_step)
        self._sums = {}  # index -> PassSums of that index's gradients

    _OWN = frozenset({"_optimizer", "_predivide", "_num_groups", "_process_set", "_passes", "_sums"})

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def __setattr__(self, name, value):
        """Everything but the wrapper's own fields is set on the wrapped
        optimizer, which updates: gluon.Trainer sets param_dict (through
        which Parameters' lr_mult and wd_mult reach the update) once and
        rescale_grad (scale / batch_size) every step on the optimizer it
        holds. Set on the wrapper, param_dict was lost: lr_mult and wd_mult
        were ignored (found comparing with gluon.Trainer at lr_mult 0.5)."""
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def create_state_multi_precision(self, index, weight):
        """The wrapped optimizer's state for `weight`."""
        return self._optimizer.create_state_multi_precision(index, weight)

    def create_state(self, index, weight):
        """The wrapped optimizer's state for `weight`."""
        return self._optimizer.create_state(index, weight)

    def _allreduce(self, index, grad):
        ps = self._process_set
        if not ps.included() or ps.size() == 1:
            return
        if isinstance(index, (tuple, list)):
            dense = [(i, g) for i, g in zip(index, grad) if not sparse_rows.is_row_sparse(g)]
            for i, g in zip(index, grad):
                if sparse_rows.is_row_sparse(g):
                    sparse_rows.reduce_in_place(g, f"optimizer.{i}", ps, 1.0 / ps.size())
            if len(dense) < len(index):
                index, grad = [i for i, _ in dense], [g for _, g in dense]
                if not index:
                    return
        elif sparse_rows.is_row_sparse(grad):  # Note [Sparse gradients travel as rows]
            sparse_rows.reduce_in_place(grad, f"optimizer.{index}", ps, 1.0 / ps.size())
            return
        if isinstance(index, (tuple, list)) and self._num_groups > 0:
            for k, (indices, grads) in enumerate(zip(_parts(list(index), self._num_groups),
                                                     _parts(list(grad), self._num_groups))):
                grouped_allreduce_(grads, name=f"optimizer.{indices[0]}:{indices[-1]}", priority=-k, op=Average,
                                   prescale_factor=1.0 / self._predivide, postscale_factor=self._predivide,
                                   process_set=ps)
        elif isinstance(index, (tuple, list)):
            for i, g in zip(index, grad):
                allreduce_(g, name=f"optimizer.{i}", priority=-i, op=Average,
                           prescale_factor=1.0 / self._predivide, postscale_factor=self._predivide,
                           process_set=ps)
        else:
            allreduce_(grad, name=f"optimizer.{index}", priority=-int(index), op=Average,
                       prescale_factor=1.0 / self._predivide, postscale_factor=self._predivide,
                       process_set=ps)

    def _accumulated(self, index, grad):
        """Note [Accumulated passes]: whether this update only added its
        gradients up (K-1 of every K); on the K-th, the earlier passes' sums
        are added into `grad`."""
        if self._passes == 1:
            return False
        indices, grads = accumulation.as_lists(index, grad)
        done = []
        for i, g in zip(indices, grads):
            if sparse_rows.is_row_sparse(g):
                raise ArgumentError(f"DistributedOptimizer: backward_passes_per_step does not combine with "
                                    f"row_sparse gradients (index {i})")
            sums = self._sums.setdefault(i, accumulation.PassSums(self._passes))
            done.append(sums.add({i: g}))
            if done[-1]:
                sums.restore({i: g})
        if any(done) and not all(done):
            raise ArgumentError(f"DistributedOptimizer: indices {indices} were updated together after different "
                                "numbers of backward passes")
        return not done[0]

    def _update_once(self, update, index, weight, grad, state):
        if self._accumulated(index, grad):
            return
        self._allreduce(index, grad)
        if self._passes == 1:
            update(index, weight, grad, state)
            return
        rescale = self._optimizer.rescale_grad
        self._optimizer.rescale_grad = rescale / self._passes
        try:
            update(index, weight, grad, state)
        finally:
            self._optimizer.rescale_grad = rescale

    def update(self, index, weight, grad, state):
        """Averages `grad` across ranks (every K-th pass with backward_passes_per_step), then updates."""
        self._update_once(self._optimizer.update, index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        """As update(), through the wrapped optimizer's multi-precision update."""
        self._update_once(self._optimizer.update_multi_precision, index, weight, grad, state)

    def set_learning_rate(self, lr):
        """Sets the wrapped optimizer's learning rate."""
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        """Sets the wrapped optimizer's learning-rate multipliers."""
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        """Sets the wrapped optimizer's weight-decay multipliers."""
        self._optimizer.set_wd_mult(args_wd_mult)
