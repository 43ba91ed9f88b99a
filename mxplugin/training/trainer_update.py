"""DistributedTrainer's updates (a mixin of it): each bucket by the core's
fused kernel where it can, the other parameters by the optimizer's own
MXNet ops as gluon.Trainer aggregates them, and model-parallel shards on
their own gradients. Reads the trainer's layout, optimizer and options.
The optimizer gets legacy views (Note [Array kinds]): its ops are legacy
operators, and gluon.Trainer's updater hands it legacy arrays too."""
from collections import OrderedDict

from mxplugin import basics
from mxplugin.array_kinds import legacy
from mxplugin.errors import ArgumentError
from mxplugin.training import native_update


class BucketUpdates:
    """The update half of DistributedTrainer's step (trainer.py holds the reduction)."""

    def _update(self, ignore_stale_grad=False):
        layout = self._layout  # step() and update() checked it in _prepare() this step
        loss_scaler = getattr(self, "_amp_loss_scaler", None)
        if loss_scaler is not None and loss_scaler.has_overflow(self._params):
            return
        opt = self._optimizer
        # Per-parameter updates run in parameter order, as gluon.Trainer runs
        # them (optimizers drawing random numbers, e.g. sgld, depend on it).
        single = []
        for bucket in layout.buckets:
            fresh = [p.data()._fresh_grad for _, p in bucket.entries]
            if not all(fresh) and not ignore_stale_grad:
                name = bucket.entries[fresh.index(False)][1].name
                raise UserWarning(
                    f"Gradient of Parameter `{name}` has not been updated by backward since last `step`. "
                    "This could mean a bug in your model that made it only use a subset of the Parameters "
                    "(Blocks) for this iteration. If you are intentionally only using a subset, call step "
                    "with ignore_stale_grad=True to suppress this warning and skip updating of Parameters "
                    "with stale gradient")
            if self._shard and not all(fresh):
                name = bucket.entries[fresh.index(False)][1].name
                raise ArgumentError(f"shard_optimizer_states=True updates whole buckets, but Parameter `{name}` "
                                    "has no new gradient (ignore_stale_grad=True cannot skip it: its slice "
                                    "belongs to another rank's update). Set grad_req='null' on parameters "
                                    "that do not train.")
            if self._shard:
                pass  # all buckets are updated below, slice by slice (ShardedStates.update)
            elif layout.fused and all(fresh) and native_update.supports(opt, bucket):
                native_update.update(opt, bucket, basics._core_module())
            else:
                single.extend((index, p, bucket) for (index, p), f in zip(bucket.entries, fresh) if f)
            for _, p in bucket.entries:
                p.data()._fresh_grad = False
        if self._shard:
            self._shards.update(opt)  # reduce-scatters, or takes the slices of allreduce_grads()'s sums
        self._update_with_mxnet_ops(sorted(single, key=lambda e: e[0]))
        self._update_local(layout, ignore_stale_grad)
        for index, p in layout.excluded:
            for arr, grad in zip(p.list_data(), p.list_grad()):
                if not ignore_stale_grad or arr._fresh_grad:
                    grad = self._dense_grads.get(index, grad)  # sparse_as_dense: the dense sum
                    self._updaters[0]([index], [grad], [arr])
                    arr._fresh_grad = False
        self._dense_grads = {}

    def _update_with_mxnet_ops(self, entries):
        """Parameters the core's kernels do not update (GPU buckets, other
        optimizers, fused_update=False), through the optimizer's own MXNet
        ops, aggregated as gluon.Trainer's updater aggregates them: runs of up
        to `aggregate_num` parameters of one dtype (and here one context, as
        one multi-tensor op runs on one device) go to one multi-tensor op
        (multi_sgd_update, multi_sgd_mom_update, multi_mp_sgd_*,
        multi_lamb_update, ...); optimizers without one update one by one."""
        opt = self._optimizer
        chunk = int(getattr(opt, "aggregate_num", 0) or 0)
        if chunk <= 1:
            for index, p, bucket in entries:
                opt.update_multi_precision(index, legacy(p.data()), legacy(p.grad()), bucket.param_states[index])
            return
        runs = OrderedDict()
        for index, p, bucket in entries:
            data = legacy(p.data())
            runs.setdefault((str(data.dtype), str(data.context)), []).append((index, data, legacy(p.grad()),
                                                                             bucket.param_states[index]))
        for run in runs.values():
            for start in range(0, len(run), chunk):
                indices, weights, grads, states = zip(*run[start:start + chunk])
                opt.update_multi_precision(list(indices), list(weights), list(grads), list(states))
        self.aggregated_updates += sum((len(r) + chunk - 1) // chunk for r in runs.values())

    def _multi_precision_weights(self, layout):
        return getattr(self._optimizer, "multi_precision", False) and any(
            str(w.dtype) == "float16" or getattr(w.dtype, "__name__", "") == "float16"
            for b in layout.buckets for w in b.weights)

    def _update_local(self, layout, ignore_stale_grad):
        """Model-parallel shards (distributed, no mesh): each rank holds its
        own slice, so its gradient is used as is -- no cross-rank scaling."""
        if not layout.local:
            return
        opt = self._optimizer
        folded = opt.rescale_grad
        opt.rescale_grad = self._local_rescale if self._local_rescale is not None else folded
        try:
            for index, p in sorted(layout.local, key=lambda e: e[0]):
                data = p.data()
                if not data._fresh_grad:
                    if ignore_stale_grad:
                        continue
                    raise UserWarning(f"Gradient of Parameter `{p.name}` has not been updated by backward "
                                      "since last `step`; pass ignore_stale_grad=True to skip it")
                opt.update_multi_precision(index, legacy(data), legacy(p.grad()), layout.local_states[index])
                data._fresh_grad = False
        finally:
            opt.rescale_grad = folded
