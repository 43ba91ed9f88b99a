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
    """Wraps an optimizer so that each update first averages its gradient
    over the ranks of `process_set`, then updates as the wrapped optimizer
    does: for ``gluon.Trainer(..., kvstore=None)``, the Module API and
    custom loops (``DistributedTrainer`` reduces gradients itself, and
    unwraps one given to it). Everything else (``learning_rate``,
    ``rescale_grad``, ``param_dict``, ...) is the wrapped optimizer's, read
    and set through the wrapper. ``row_sparse`` gradients are averaged as
    the rows each rank touched, for the optimizer's sparse update on their
    union.

    Horovod: ``hvd.DistributedOptimizer``, same first four parameters and
    defaults and the same averaged updates (Horovod folds the division by
    the size into ``rescale_grad``, here the allreduce averages);
    ``backward_passes_per_step`` is mxplugin's own (Horovod's PyTorch
    name), and Horovod cannot reduce ``row_sparse`` gradients.

    Parameters
    ----------
    optimizer : mxnet.optimizer.Optimizer
        The optimizer that updates, on the averaged gradients.
    gradient_predivide_factor : float, default 1.0
        Each gradient is divided by it before the sum and multiplied by it
        after (the average is the same; large sums of float16 stay in range).
    num_groups : int, default 0
        When an update takes several indices at once (MXNet's updater passes
        lists where the optimizer aggregates), their gradients are reduced in
        this many grouped allreduces; 0: one allreduce each.
    process_set : ProcessSet, default ``global_process_set``
        The ranks whose gradients are averaged.
    backward_passes_per_step : int, default 1
        K: of every K updates of an index, K-1 only add its gradient up
        locally; the K-th reduces the sum once and updates as one process on
        the combined batch of the K passes (of equal batch sizes:
        ``rescale_grad`` is divided by K for it). Not with ``row_sparse``
        gradients.

    Raises
    ------
    ArgumentError
        A ``gradient_predivide_factor`` that is not positive, or a
        ``backward_passes_per_step`` below 1.

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=1.0))
    >>> weight, grad = mx.nd.zeros(2), mx.nd.full(2, hvd.rank() + 1)
    >>> opt.update(0, weight, grad, opt.create_state(0, weight))
    >>> weight.asnumpy().tolist() == [-(hvd.size() + 1) / 2] * 2  # one step on the ranks' average
    True
    """

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
        """The wrapped optimizer's state for `weight`, with a float32 master
        copy where the optimizer keeps one (``multi_precision``).

        Horovod: the same method.

        Parameters
        ----------
        index : int
            The weight's index, as the updater numbers them.
        weight : NDArray
            The weight.

        Returns
        -------
        object
            What the wrapped optimizer's ``create_state_multi_precision`` returns.
        """
        return self._optimizer.create_state_multi_precision(index, weight)

    def create_state(self, index, weight):
        """The wrapped optimizer's state for `weight`.

        Horovod: not forwarded there (its wrapper inherits
        ``Optimizer.create_state``, which gives no state); here it is.

        Parameters
        ----------
        index : int
            The weight's index, as the updater numbers them.
        weight : NDArray
            The weight.

        Returns
        -------
        object
            What the wrapped optimizer's ``create_state`` returns (None for
            plain SGD).
        """
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
        """Averages `grad` over the ranks, in place, then updates `weight` as
        the wrapped optimizer's ``update`` does (with
        ``backward_passes_per_step`` K, K-1 of every K calls only add the
        gradient up). A collective: every rank of the set updates the same
        indices.

        Horovod: the same method and update (Horovod sums, its average
        coming from ``rescale_grad``, scaled once when it wraps).

        Parameters
        ----------
        index : int or list of int
            The weight's index, or the indices of an aggregated update.
        weight : NDArray or list of NDArray
            The weights, updated in place.
        grad : NDArray or list of NDArray
            Their gradients, averaged over the ranks in place.
        state : object or list
            The optimizer states ``create_state`` gave.

        Raises
        ------
        ArgumentError
            With ``backward_passes_per_step`` > 1: a ``row_sparse`` gradient,
            or indices updated together after different numbers of passes.
        """
        self._update_once(self._optimizer.update, index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        """As ``update()``, through the wrapped optimizer's
        ``update_multi_precision`` (what ``gluon.Trainer`` calls).

        Horovod: the same method.

        Parameters
        ----------
        index : int or list of int
            The weight's index, or the indices of an aggregated update.
        weight : NDArray or list of NDArray
            The weights, updated in place.
        grad : NDArray or list of NDArray
            Their gradients, averaged over the ranks in place.
        state : object or list
            The states ``create_state_multi_precision`` gave.
        """
        self._update_once(self._optimizer.update_multi_precision, index, weight, grad, state)

    def set_learning_rate(self, lr):
        """Sets the wrapped optimizer's learning rate.

        Horovod: the same method.

        Parameters
        ----------
        lr : float
            The new learning rate.
        """
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        """Sets the wrapped optimizer's learning-rate multipliers.

        Horovod: the same method.

        Parameters
        ----------
        args_lr_mult : dict of str or int to float
            Multipliers by parameter name or index, as for
            ``mxnet.optimizer.Optimizer.set_lr_mult``.
        """
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        """Sets the wrapped optimizer's weight-decay multipliers.

        Horovod: the same method.

        Parameters
        ----------
        args_wd_mult : dict of str or int to float
            Multipliers by parameter name or index, as for
            ``mxnet.optimizer.Optimizer.set_wd_mult``.
        """
        self._optimizer.set_wd_mult(args_wd_mult)
