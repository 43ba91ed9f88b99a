"""join_when_done: a training loop over uneven data, for any trainer.

Note [Shadow steps]: ranks with fewer batches than the others must keep
taking part in the others' gradient reductions until every rank is done,
or those reductions wait for them forever. The core's join() (joined.join)
does that for raw collectives by standing in with zeros, but a trainer
does more than reduce: with sharded states each rank updates and gathers
its slice, PowerSGD exchanges factors, and the weights of a rank that
stopped updating would fall behind the others'. So a rank that has run
out of batches here runs shadow steps: the trainer's own step on zero
gradients, which makes every collective the others' steps make, and the
same update from the same reduced gradients, so every rank keeps equal
weights (as PyTorch DDP's Join context shadows the others' allreduces).

Before each step every rank adds [1, its batch size, step or
allreduce_grads] (a shadowing rank: zeros) in one small blocking
allreduce (functions.RankTotals): its sum is how many ranks still train, their batch sizes, and
which call they make, so a shadowing rank knows whether to step again,
with which batch size and by which call, and every rank knows the divisor
of this step's average. (allreduce_grads() comes before the batch size is
known, so update() sends it in a second round.) By default that is the ranks still training (the
update equals one process training on their batches combined); with
divide_by_initial_size=True, the set's size (as Horovod's join, whose
joined ranks add zeros to an average over every rank). The trainer's
step(batch_size) averages over the set's size, so the batch size it gets
is scaled by active / size. When every rank has run out, each leaves the
context at the same step.
"""
import contextlib

from mxplugin import basics
from mxplugin.errors import ArgumentError
from mxplugin.functions import RankTotals
from mxplugin.training import sparse_rows

_STEP, _ALLREDUCE_GRADS = 1, 2  # the call the ranks still training make, in the round's third slot


class _Join:
    """The state of one join_when_done context: wraps the trainer's step()
    and allreduce_grads()/update() while it lasts."""

    def __init__(self, trainer, divide_by_initial_size, process_set, name):
        self.trainer = trainer
        self.initial = bool(divide_by_initial_size)
        self.process_set = process_set
        self.totals = RankTotals(name, ("training", "batch", "call"), process_set)
        self.batch_totals = RankTotals(name + ".batch", ("batch",), process_set)
        self.rounds = 0
        self.shadow_steps = 0  # steps this rank took on zero gradients
        self.active = None  # ranks that trained in the last round
        self._pending_fold = None  # allreduce_grads() ran its round; update() scales by it
        self._originals = {}

    # -- the round ----------------------------------------------------------------
    def _round(self, batch_size, call):
        """Sums [training, batch size, call] over the set; returns (ranks
        still training, their mean batch size, the call they make)."""
        mine = dict(training=1.0, batch=float(batch_size), call=float(call)) if call else {}  # a shadow adds nothing
        total = self.totals.sum(**mine)
        self.rounds += 1
        active = int(round(total["training"]))
        self.active = active
        if active == 0:
            return 0, 0.0, 0
        calls = int(round(total["call"]))
        if calls not in (active * _STEP, active * _ALLREDUCE_GRADS):
            raise ArgumentError("join_when_done: the ranks still training called step() and allreduce_grads() "
                                "in the same round; every rank must make the same call each iteration")
        return active, total["batch"] / active, calls // active

    def _scaled(self, batch_size, active):
        """The batch size that makes the trainer's average over the set's
        size one over `active` ranks (Note [Shadow steps])."""
        size = self.process_set.size()
        return batch_size if self.initial else batch_size * active / size

    # -- the trainer's calls while the context lasts ---------------------------------
    def step(self, batch_size, ignore_stale_grad=False):
        active, _, _ = self._round(batch_size, _STEP)
        self._originals["step"](self._scaled(batch_size, active), ignore_stale_grad)

    def _batch_round(self, batch_size, active):
        """allreduce_grads() comes before the batch size is known: update()
        tells it the shadowing ranks in a round of its own; returns the
        mean batch size of the `active` ranks still training."""
        return self.batch_totals.sum(batch=float(batch_size))["batch"] / active

    def allreduce_grads(self):
        active, _, _ = self._round(0.0, _ALLREDUCE_GRADS)
        self._pending_fold = active
        self._originals["allreduce_grads"]()

    def update(self, batch_size, ignore_stale_grad=False):
        active, self._pending_fold = self._pending_fold, None
        if active is not None:
            self._batch_round(batch_size, active)
        scaled = batch_size if active is None else self._scaled(batch_size, active)
        self._originals["update"](scaled, ignore_stale_grad)

    def wrap(self):
        for call in ("step", "allreduce_grads", "update"):
            self._originals[call] = getattr(self.trainer, call)
            setattr(self.trainer, call, getattr(self, call))

    def unwrap(self):
        for call, original in self._originals.items():
            setattr(self.trainer, call, original)

    # -- this rank is out of batches ---------------------------------------------------
    def shadow(self):
        """Shadow steps until every rank is out of batches."""
        while True:
            active, batch_size, call = self._round(0, 0)
            if active == 0:
                return
            _zero_gradients(self.trainer)
            scaled = self._scaled(batch_size, active)
            if call == _STEP:
                self._originals["step"](scaled)
            else:
                self._originals["allreduce_grads"]()
                batch_size = self._batch_round(0.0, active)
                self._originals["update"](self._scaled(batch_size, active))
            self.shadow_steps += 1


def _zero_gradients(trainer):
    """Zero, fresh gradients: what a backward on nothing would leave."""
    for param in trainer._params:
        if param.grad_req == "null":
            continue
        for grad in param.list_grad():
            if sparse_rows.is_row_sparse(grad):
                sparse_rows.clear(grad)  # no rows touched (zeros in every row would be updated lazily)
            else:
                grad[:] = 0
        for data in param.list_data():
            data._fresh_grad = True


@contextlib.contextmanager
def join_when_done(trainer, divide_by_initial_size=False, process_set=None):
    """Trains over uneven data: every rank runs its own number of batches in
    the ``with`` block; a rank that has run out takes shadow steps in the
    others' steps, on zero gradients, until every rank has, so that every
    collective of the others' steps completes and every rank keeps the same
    weights. For a DistributedTrainer (any mode but local SGD) and a
    gluon.Trainer with ``kvstore='mxplugin'`` or a DistributedOptimizer,
    whose ``step(batch_size)``, or ``allreduce_grads()`` then
    ``update(batch_size)``, the block calls once per batch, alike on every
    rank. The average of each step is over the ranks still training (the
    update equals one process training on their batches combined), or over
    the set's size with ``divide_by_initial_size=True``. Every rank makes
    one small blocking allreduce more per step. An error in the block
    leaves it at once, without shadow steps (the others then fail naming
    this rank).

    Horovod: none (Horovod's ``hvd.join()`` is the raw collectives' way,
    also here: ``mxplugin.join``); PyTorch DDP's ``Join`` context shadows
    the others' allreduces alike.

    Parameters
    ----------
    trainer : DistributedTrainer or gluon.Trainer
        The trainer the block steps; its ``step``, ``allreduce_grads`` and
        ``update`` are wrapped while the block lasts.
    divide_by_initial_size : bool, default False
        Average each step over the set's size (as Horovod's join, whose
        joined ranks add zeros), not over the ranks still training.
    process_set : ProcessSet, optional
        The ranks that train together; by default the trainer's (every rank).

    Yields
    ------
    object
        The context's state: its ``shadow_steps`` says how many steps this
        rank took on zeros.

    Raises
    ------
    ArgumentError
        With ``local_sgd_steps``; where the ranks still training call
        ``step()`` and ``allreduce_grads()`` in the same round.

    Examples
    --------
    >>> import mxnet as mx, mxplugin as hvd
    >>> hvd.init()
    >>> net = mx.gluon.nn.Dense(1, in_units=2)
    >>> net.initialize(mx.init.One())
    >>> trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    >>> batches = [mx.nd.ones((2, 2))] * (hvd.rank() + 1)  # uneven: rank r has r + 1 batches
    >>> with hvd.join_when_done(trainer) as joined:
    ...     for x in batches:
    ...         with mx.autograd.record():
    ...             loss = net(x).sum()
    ...         loss.backward()
    ...         trainer.step(x.shape[0])
    >>> joined.shadow_steps == hvd.size() - 1 - hvd.rank()
    True
    >>> w = net.weight.data().asnumpy()  # the same on every rank
    >>> bool((hvd.broadcast(net.weight.data(), root_rank=0).asnumpy() == w).all())
    True
    """
    if process_set is None:
        process_set = getattr(trainer, "_process_set", None) or basics.global_process_set
    if getattr(trainer, "_local_sgd_steps", 0):
        raise ArgumentError("join_when_done does not combine with local_sgd_steps: a rank with no batches has "
                            "no local steps to take, and the parameter averages would count it")
    prefix = getattr(trainer, "_prefix", "trainer.")
    state = _Join(trainer, divide_by_initial_size, process_set, f"{prefix}join")
    state.wrap()
    try:
        yield state
        state.shadow()
    finally:
        state.unwrap()
