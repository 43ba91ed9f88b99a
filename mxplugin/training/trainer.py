"""DistributedTrainer: a gluon.Trainer whose gradients are reduced across ranks
in contiguous buckets and whose same-type parameter groups are updated by one
fused call each (see buckets.py). Here: its options, layout, reduction and
steps; the updates are in trainer_update.py, the optimizer states and their
checkpoints in trainer_states.py, the parameters outside the buckets in
trainer_excluded.py."""
import itertools
import logging
import warnings
from collections import OrderedDict

import mxnet as mx

from mxplugin import basics
from mxplugin.basics import global_process_set
from mxplugin.calls import push_batch
from mxplugin.errors import ArgumentError, MismatchError
from mxplugin.functions import allgather_object, parameter_difference
from mxplugin.ops import Average, Sum, allreduce_, grouped_allreduce_by_context_
from mxplugin.training import accumulation
from mxplugin.training import autotune as autotune_module
from mxplugin.training import native_update, sharding
from mxplugin.training.buckets import Layout
from mxplugin.training.compression import Compression, PowerSGD
from mxplugin.training.optimizer import DistributedOptimizer
from mxplugin.training.powersgd import PowerSGDReducer
from mxplugin.training.trainer_states import TrainerStates, bucket_state_arrays
from mxplugin.training.trainer_excluded import ExcludedReductions
from mxplugin.training.trainer_update import BucketUpdates

_trainer_ids = itertools.count()
_log = logging.getLogger(__name__)


class DistributedTrainer(BucketUpdates, TrainerStates, ExcludedReductions, mx.gluon.Trainer):
    """A ``gluon.Trainer`` whose gradients are summed over the ranks before
    each update, so that N ranks make the update one process makes on their
    combined batch. Horovod: ``horovod.mxnet.DistributedTrainer``, same
    signature; the options after ``process_set`` are mxplugin's own.

    Parameters
    ----------
    params : ParameterDict, dict or list of Parameter
        The parameters to train, as for ``gluon.Trainer``; every rank must
        pass the same ones (a difference is named at the first step).
    optimizer : str or mxnet.optimizer.Optimizer
        The optimizer, by name (``"sgd"``) or as an instance. A
        ``DistributedOptimizer`` is unwrapped, with a warning.
    optimizer_params : dict, optional
        Keyword arguments of the optimizer, when it is given by name.
    compression : Compression, default ``Compression.none``
        How each gradient bucket travels: ``Compression.fp16`` or ``bf16``
        (sent in that type), or ``Compression.powersgd(rank=...)`` (low-rank
        factors with error feedback; not with local SGD or sharded states).
    gradient_predivide_factor : float, default 1.0
        Gradients are scaled by ``1/f`` before the sum and by ``f/size``
        after it, the latter folded into the optimizer's ``rescale_grad``.
    prefix : str, optional
        Prefix of the trainer's collective names; by default one per trainer,
        in creation order (create trainers in the same order on every rank).
    num_groups : int, default 0
        Cuts the gradients into this many buckets (Horovod's option); 0: by ``bucket_bytes``.
    process_set : ProcessSet, default ``global_process_set``
        The ranks whose gradients are summed. Use ``mesh`` instead for
        tensor and data parallelism together.
    bucket_bytes : int, default 25 MiB
        Size of a gradient bucket; each bucket is one in-place allreduce,
        the last layers' first, while backward still runs.
    fused_update : bool, default True
        Updates each bucket with one optimizer call over its flat buffers
        when the optimizer is element-wise.
    mesh : parallel.ProcessMesh, optional
        Averages the gradients (shards of partitioned layers included) over
        the mesh's data-parallel group; replaces ``process_set``.
    local_sgd_steps : int, default 0
        With K > 0, each rank updates on its own gradients and the
        parameters are averaged every K steps.
    local_sgd_warmup_steps : int, default 0
        Ordinary steps before local SGD starts.
    local_sgd_average_states : bool, default False
        Averages the optimizer states with the parameters in local SGD.
    shard_optimizer_states : bool, default False
        Each rank keeps the optimizer states of 1/N of every bucket (ZeRO-1):
        gradients are reduce-scattered, each rank updates its slice, the
        weights are allgathered. Element-wise optimizers and LAMB; not with
        compression or local SGD.
    autotune : bool, optional
        Measures the first steps under several bucket sizes and keeps the
        fastest; by default as ``MXPLUGIN_AUTOTUNE`` says (off).
    sparse_as_dense : bool, default False
        Reduces ``row_sparse`` gradients densified, for a dense update
        (Horovod's option); by default they travel as the rows each rank
        touched and the optimizer makes its lazy update on their union.
    backward_passes_per_step : int, default 1
        Call ``step()`` after every backward pass: the gradients of K passes
        add up locally and are summed over the ranks once, at every K-th
        ``step()``, which updates as one process on the K passes' combined
        batch. Not with local SGD, ``grad_req='add'`` or ``row_sparse``
        gradients.

    Raises
    ------
    ArgumentError
        For options that do not combine (each named in the message).
    MismatchError
        At the first step, on every rank, when ranks' parameters differ.

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> net = mx.gluon.nn.Dense(1, in_units=2)
    >>> net.initialize()
    >>> hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    >>> trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    >>> with mx.autograd.record():
    ...     loss = net(mx.nd.ones((4, 2))).sum()
    >>> loss.backward()
    >>> trainer.step(4)  # this rank's batch size
    >>> net.weight.data().asnumpy().shape  # reading the values waits for the step's allreduce
    (1, 2)
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=global_process_set, bucket_bytes=25 << 20, fused_update=True,
                 mesh=None, local_sgd_steps=0, local_sgd_warmup_steps=0, local_sgd_average_states=False,
                 shard_optimizer_states=False, autotune=None, sparse_as_dense=False, backward_passes_per_step=1):
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError("prefix must be a str or None")
        if not gradient_predivide_factor > 0:
            raise ArgumentError("gradient_predivide_factor must be positive")
        if isinstance(optimizer, DistributedOptimizer):
            # As horovod.mxnet: a wrapped optimizer would reduce every gradient
            # a second time, so it is unwrapped, with a warning.
            warnings.warn("DistributedTrainer reduces gradients itself: the DistributedOptimizer given was "
                          "unwrapped and its inner optimizer is used", UserWarning, stacklevel=2)
            optimizer = optimizer._optimizer
        if isinstance(params, dict):
            params = OrderedDict(params)
        elif isinstance(params, (list, tuple)):
            params = sorted(params, key=lambda p: p.name)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._predivide = float(gradient_predivide_factor)
        # Stable, distinct names per trainer: two trainers (a GAN) never collide
        # as long as every rank creates them in the same order.
        self._prefix = prefix if prefix is not None else f"trainer{next(_trainer_ids)}."
        self._num_groups = int(num_groups)
        self._process_set = process_set
        self._bucket_bytes = int(bucket_bytes)
        self._fused_update = bool(fused_update)
        self._layout = None
        self._pending_states = None
        self._mesh = mesh
        if mesh is not None:
            self._process_set = mesh.dp_set
        if local_sgd_steps < 0 or local_sgd_warmup_steps < 0:
            raise ArgumentError("local_sgd_steps and local_sgd_warmup_steps must be >= 0")
        self._local_sgd_steps = int(local_sgd_steps)
        self._local_sgd_warmup = int(local_sgd_warmup_steps)
        self._local_sgd_states = bool(local_sgd_average_states)
        self._shard = bool(shard_optimizer_states)
        self._passes = accumulation.PassSums(accumulation.passes_per_step(backward_passes_per_step))
        if self._passes.passes > 1 and self._local_sgd_steps:
            raise ArgumentError("backward_passes_per_step does not combine with local_sgd_steps: local SGD "
                                "reduces parameters, not gradients. Pass one of them.")
        if self._shard:
            sharding.check_shardable(self._optimizer, compression, self._local_sgd_steps)
        self._powersgd = None  # powersgd.PowerSGDReducer, with Compression.powersgd()
        if isinstance(compression, PowerSGD):
            if self._local_sgd_steps:
                raise ArgumentError("Compression.powersgd() does not combine with local_sgd_steps: local SGD "
                                    "averages parameters, not gradients, so there is nothing to compress. Pass "
                                    "compression=Compression.none (or local_sgd_steps=0).")
            self._powersgd = PowerSGDReducer(compression, self._prefix)
        self._shards = None  # sharding.ShardedStates of the layout, when sharded
        self._tune_settings = autotune_module.Settings(autotune)
        self._tuner = autotune_module.BucketTuner(self._tune_settings, self._prefix)
        if self._local_sgd_steps:
            self._tuner.stop("local SGD steps reduce no gradients")
        elif self._num_groups > 0:
            self._tuner.stop("num_groups cuts the buckets, not bucket_bytes")
        self._relayout = False  # the tuner changed bucket_bytes: build the layout again
        self._sparse_as_dense = bool(sparse_as_dense)
        self._dense_grads = {}  # index -> the dense sum of a row_sparse gradient (sparse_as_dense), this step
        self._steps = 0
        self._grads_summed = False  # allreduce_grads() left sums that the next update() scales
        self._local_rescale = None
        self.num_reductions = 0  # gradient or parameter reductions run (one per bucket set)
        self._layout_agreed = False  # ranks' parameters compared (at the first reduction)
        self.aggregated_updates = 0  # multi-tensor MXNet optimizer calls made (see _update_with_mxnet_ops)

    # -- layout -----------------------------------------------------------------
    def _ensure_layout(self):
        if self._layout is not None and self._layout.intact() and not self._relayout:
            return self._layout
        self._relayout = False
        old_states = self._param_states() if self._layout is not None else None
        self._layout = Layout(self._params, self._optimizer, self._bucket_bytes, self._num_groups,
                              include_distributed=self._mesh is not None, bucket_states=not self._shard,
                              compressed=self._powersgd.config.compresses if self._powersgd else None,
                              fused_update=self._fused_update)
        if self._shard:
            self._shards = sharding.ShardedStates(self._layout, self._optimizer, self._process_set, self._prefix)
        for states in (old_states, self._pending_states):
            if states:
                self._layout.load_param_states(states)
                if self._shards is not None:
                    self._shards.load_param_states(states)
        self._pending_states = None
        # The core's optimizer kernels (src/optim/) run on host memory: buckets
        # on a GPU are updated per parameter by MXNet's own optimizer ops
        # (native_update.supports says no), their gradients still reduced in
        # place by the core's GPU path.
        on_gpu = [i for i, b in enumerate(self._layout.buckets) if b.ctx.device_type == "gpu"]
        if on_gpu and self._layout.fused and native_update.has_kernel(self._optimizer):
            _log.debug("buckets %s are on a GPU: updated by MXNet's %s op per parameter, not the core's "
                       "CPU kernel", on_gpu, type(self._optimizer).__name__)
        return self._layout

    def _prepare(self):
        """The layout, its buckets holding what the last backward wrote."""
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()
        layout = self._ensure_layout()
        layout.gather_gradients(basics._core_module())
        return layout

    # -- reduction ----------------------------------------------------------------
    def _world(self):
        ps = self._process_set
        return ps.included() and ps.size() > 1

    def _reduce(self, scatter=False):
        """Sums each gradient over the process set (prescaled by 1/f); the
        f/size that makes it an average is left to the update's rescale_grad.
        scatter (sharded states): each rank gets the sum of its slices only."""
        layout = self._prepare()
        if self._passes.count:  # the last of the step's passes: Note [Accumulated passes]
            self._passes.restore(accumulation.layout_arrays(layout))
        self._densify(layout)
        if not self._world():
            return
        if not self._layout_agreed:
            self._check_layout_agrees(layout)
        self._layout_agreed = True
        if not self._tuner.done:
            bucket_bytes = self._tuner.tick(self)
            if bucket_bytes is not None and bucket_bytes != self._bucket_bytes:
                self._bucket_bytes = bucket_bytes
                self._relayout = True
                layout = self._prepare()  # this step's gradients move into the new buckets
        self.num_reductions += 1
        if scatter:
            self._shards.reduce_scatter(self._predivide)
        compressed = [b for b in layout.buckets if b.compressed]
        if compressed and not self._powersgd.in_warmup():
            self._powersgd.reduce([(index, g) for b in compressed for (index, _), g in zip(b.entries, b.grad_views)],
                                  self._process_set, 1.0 / self._predivide)
        else:
            compressed = []
        for i, bucket in enumerate(layout.buckets if not scatter else ()):
            if bucket in compressed:
                continue
            sent, ctx = self._compression.compress(bucket.grad)
            allreduce_(sent, name=f"{self._prefix}bucket{i}", priority=-i, op=Sum,
                       prescale_factor=1.0 / self._predivide, process_set=self._process_set)
            if sent is not bucket.grad:
                bucket.grad[:] = self._compression.decompress(sent, ctx)
        self._reduce_excluded(layout)

    def _check_layout_agrees(self, layout):
        """Once, at the first reduction (which every rank reaches): ranks
        whose parameters differ would get a mismatch naming a bucket; name
        the first parameter that differs instead, on every rank."""
        mine = [(p.name, tuple(p.shape), str(p.dtype)) for b in layout.buckets for _, p in b.entries]
        ps = self._process_set
        # The tuning settings too (Note [Autotune]), in the same exchange.
        everyone = allgather_object((mine, self._tune_settings.signature()), name=f"{self._prefix}layout",
                                    process_set=ps)
        difference = parameter_difference([theirs for theirs, _ in everyone], "nothing", ps)
        if not difference:
            error = autotune_module.disagreement([tuning for _, tuning in everyone], ps)
            if error:
                raise error
        if difference:
            i, detail = difference
            raise MismatchError(f"DistributedTrainer '{self._prefix}': the trainable parameters differ across "
                                f"ranks; the first difference, at position {i} in reduction order (last layers "
                                f"first): {detail}. Every rank must build the same model.")

    def _fold_factor(self):
        """Post-scale of the Sum that step() folds into rescale_grad."""
        return self._predivide / self._process_set.size() if self._world() else 1.0

    # Note [Reduced gradients are sums]: after allreduce_grads() the
    # gradients hold what one process on the combined batch would hold: the
    # sum over the process set's ranks (divided by f), as a multi-device
    # gluon.Trainer's allreduce_grads() and Horovod's CPU build leave them.
    # So code between allreduce_grads() and update() (clip_global_norm at a
    # single-process threshold, a gradient-norm log) sees one process's
    # numbers; update(batch_size), with the per-rank batch size as in step(),
    # applies f/size with the usual 1/batch_size.
    def allreduce_grads(self):
        """Sums the gradients over the ranks (divided by ``gradient_predivide_factor``), for code between it
        and ``update()`` (clipping, a gradient norm): they then hold what one process on the combined batch would.

        Horovod: ``DistributedTrainer.allreduce_grads()`` (gluon.Trainer's), which leaves the same sums.

        Raises
        ------
        ArgumentError
            With ``backward_passes_per_step`` > 1 (call ``step()``)."""
        if self._passes.passes > 1:
            raise ArgumentError("allreduce_grads() reduces every pass; with backward_passes_per_step > 1 call "
                                "step() after each backward pass (Note [Accumulated passes])")
        with push_batch():  # Note [Diverged pushes] in src/core/diverged_pushes.cc
            self._reduce()
        self._grads_summed = self._world()

    def step(self, batch_size, ignore_stale_grad=False):
        """Sums the gradients over the ranks and updates, as
        ``gluon.Trainer.step()`` on the combined batch.

        Parameters
        ----------
        batch_size : int
            This rank's own batch size (the gradients are averaged over the
            ranks' combined batch).
        ignore_stale_grad : bool, default False
            As in ``gluon.Trainer.step``: skips, rather than refuses,
            parameters no backward gave a gradient since the last step.

        With ``backward_passes_per_step`` K, K-1 of every K calls only add
        up the pass's gradients.
        """
        if self._passes.passes > 1:
            layout = self._prepare()
            if self._passes.count == 0:
                accumulation.refuse_own_accumulation(self._params, f"DistributedTrainer '{self._prefix}'")
            if not self._passes.add(accumulation.layout_arrays(layout), batch_size):
                return
            batch_size = self._passes.batch_size
        self._steps += 1
        with push_batch():  # one stamp for the step's collectives: Note [Diverged pushes]
            if self._local_sgd_steps and self._steps > self._local_sgd_warmup:
                self._local_sgd_step(batch_size, ignore_stale_grad)
                return
            self._reduce(scatter=self._shard)
            self._grads_summed = False  # this step's own reduction is scaled here
            self._local_rescale = self._scale / batch_size
            self._check_and_rescale_grad(self._scale * self._fold_factor() / batch_size)
            self._update(ignore_stale_grad)

    def _local_sgd_step(self, batch_size, ignore_stale_grad):
        """Local update; every K-th local step averages the parameters."""
        layout = self._prepare()
        self._local_rescale = self._scale / batch_size
        self._check_and_rescale_grad(self._scale / batch_size)
        self._update(ignore_stale_grad)
        if (self._steps - self._local_sgd_warmup) % self._local_sgd_steps or not self._world():
            return
        self.num_reductions += 1
        arrays = [w for bucket in layout.buckets for w in bucket.weights]
        arrays += [a for _, p in layout.excluded for a in p.list_data()]
        if self._local_sgd_states or self._multi_precision_weights(layout):
            # Multi-precision updates start from the float32 master copy in the
            # state, so it must be averaged with the weights it shadows.
            arrays += [a for bucket in layout.buckets for a in bucket_state_arrays(bucket)]
        grouped_allreduce_by_context_(arrays, f"{self._prefix}localsgd", Average, process_set=self._process_set)

    def update(self, batch_size, ignore_stale_grad=False):
        """Updates with the gradients as they are: after ``allreduce_grads()``,
        sums over the ranks, scaled here to the average ``step()`` takes;
        without it, this rank's own.

        Parameters
        ----------
        batch_size : int
            This rank's own batch size, as for ``step()``.
        ignore_stale_grad : bool, default False
            As in ``gluon.Trainer.update``.
        """
        self._prepare()
        if self._shard and self._world() and not self._grads_summed:
            raise ArgumentError("update() of a trainer with shard_optimizer_states=True needs allreduce_grads() "
                                "first: each rank updates only its slice of the parameters, from the gradients "
                                "summed over all ranks. Call allreduce_grads() before update(), or step().")
        fold = self._fold_factor() if self._grads_summed else 1.0
        self._grads_summed = False
        self._local_rescale = self._scale / batch_size
        self._check_and_rescale_grad(self._scale * fold / batch_size)
        with push_batch():  # a sharded update's allgathers: Note [Diverged pushes]
            self._update(ignore_stale_grad)

    def _allreduce_grads(self):
        self.allreduce_grads()
