"""The API reference of the elastic states. Each public name keeps its
summary as its docstring where it is defined; its reference sections
(Horovod's equivalent, Parameters, Returns, Raises, Examples) are kept
here, so that the code stays short to read, and `complete` attaches them.
Together they are what the reference page shows."""
import inspect

_COMMITS = """commits : int
    The commit count the snapshot records, as its ``"commits"`` key."""

_SNAPSHOT = """snapshot : dict
    A snapshot of a state of this kind, as ``snapshot()`` makes it."""

SECTIONS = {}

SECTIONS["HostsUpdatedInterrupt"] = """
Horovod: ``horovod.common.exceptions.HostsUpdatedInterrupt(skip_sync)``, a
RuntimeError too; here ``skip_sync`` is optional and has no effect, and a
message may be given.

Parameters
----------
message : str, default "the launcher's hosts changed"
    The error's text.
skip_sync : bool, default False
    Kept as the attribute ``skip_sync``, for Horovod's signature (there
    True when hosts were only removed, to skip the next sync); a new world
    here always syncs.

Examples
--------
>>> import mxplugin as hvd
>>> error = hvd.elastic.HostsUpdatedInterrupt()
>>> isinstance(error, RuntimeError), error.skip_sync
(True, False)
>>> str(error)
"the launcher's hosts changed"
"""

SECTIONS["State"] = """
Horovod: ``horovod.common.elastic.State(bcast_object, get_rank)``; here the
constructor takes nothing (mxplugin's ``broadcast_object`` and ``rank`` are
used), and a commit keeps one snapshot that can travel as bytes
(``dumps``, ``loads``): that is how a new world gets it. So a subclass
implements ``snapshot`` and ``apply`` where a Horovod subclass implements
``save`` and ``restore``; it may implement ``check_snapshot``, and calls
``save()`` once its values are set, at the end of its ``__init__``.
``commits`` counts the commits its values have gone through.

Examples
--------
>>> import mxplugin as hvd
>>> hvd.init()
>>> class Counter(hvd.elastic.State):
...     def __init__(self):
...         super().__init__()
...         self.count = 0
...         self.save()
...     def snapshot(self, commits):
...         return {"commits": commits, "count": self.count}
...     def apply(self, snapshot):
...         self.count = snapshot["count"]
...     def sync(self):
...         self.commits, self.count = hvd.broadcast_object((self.commits, self.count), root_rank=0)
...         self.save()
>>> state = Counter()
>>> state.count = 5
>>> state.commit()
>>> state.count = 7
>>> state.restore()
>>> state.count, state.commits
(5, 1)
"""

SECTIONS["State.register_reset_callbacks"] = """
Horovod: ``State.register_reset_callbacks``, same argument; there the
callbacks run before the state's sync, here after it, so that the restored
optimizer states do not undo them.

Parameters
----------
callbacks : list of callable
    Functions of no arguments, added to those registered before. They run
    in order in every world of an elastic launch but the first, once the
    state is synced (never outside an elastic launch).
"""

SECTIONS["State.on_reset"] = """
Horovod: ``State.on_reset``, which Horovod's ``run`` calls before the
state's sync; here after it.
"""

SECTIONS["State.commit"] = """
Horovod: ``State.commit``, same; here each commit is counted (``commits``)
and may go to a checkpoint file, as above. Call it at the same point on every rank: in an elastic launch it
is a collective, and so is a ``GluonState``'s snapshot of sharded or
PowerSGD optimizer states. Commits copy the values (parameters from the
device to the host): commit every few steps rather than every step.

Raises
------
HostsUpdatedInterrupt
    On every rank, in an elastic launch whose hosts changed, once the
    commit is kept: let it propagate out of the function that
    ``mxplugin.elastic.run`` wraps, which ends this world there.
"""

SECTIONS["State.check_host_updates"] = """
Horovod: ``State.check_host_updates``, same. A collective in an elastic
launch (rank 0's answer is broadcast): every rank calls it, at the same
point.

Raises
------
HostsUpdatedInterrupt
    On every rank, when the launcher's hosts changed.
"""

SECTIONS["State.save"] = """
Horovod: ``State.save``, which a Horovod subclass implements; here it takes
``snapshot(commits)``.
"""

SECTIONS["State.restore"] = """
Horovod: ``State.restore``, same.
"""

SECTIONS["State.commits_saved"] = """
Returns
-------
int
    The commit count of the committed snapshot.
"""

SECTIONS["State.dumps"] = """
Returns
-------
bytes
    The committed snapshot, pickled: ``loads`` takes it, in this process or
    another.
"""

SECTIONS["State.loads"] = """
Parameters
----------
data : bytes
    What ``dumps()`` returned for a state of this kind (for a
    ``GluonState``, of a network built the same way). It is unpickled: pass
    only bytes you trust.

Raises
------
ValueError
    When ``check_snapshot`` finds that the snapshot does not fit this state.
"""

SECTIONS["State.check_snapshot"] = """
Parameters
----------
snapshot : dict
    The snapshot ``loads`` is about to apply.

Raises
------
ValueError
    When it cannot be applied to this state (this base accepts any).
"""

SECTIONS["State.snapshot"] = f"""
Parameters
----------
{_COMMITS}

Returns
-------
dict
    Picklable copies of the current values (later changes do not reach
    them), with ``"commits"``.

Raises
------
NotImplementedError
    In this base class: a subclass implements it.
"""

SECTIONS["State.apply"] = f"""
Parameters
----------
{_SNAPSHOT}

Raises
------
NotImplementedError
    In this base class: a subclass implements it.
"""

SECTIONS["State.sync"] = """
Horovod: ``State.sync``, same. A collective: every rank calls it, at the
same point. A subclass gives rank 0's values and ``commits`` to every rank,
then calls ``save()``.

Raises
------
NotImplementedError
    In this base class: a subclass implements it.
"""

SECTIONS["ObjectState"] = """
Horovod: ``horovod.common.elastic.ObjectState(bcast_object, get_rank,
**kwargs)``; here only the values are passed (mxplugin's
``broadcast_object`` and ``rank`` are used), and a commit keeps deep copies
(Horovod's keeps the objects: a list changed in place after a commit
changes the committed one too).

Parameters
----------
**values : picklable objects
    The values to keep, each an attribute of the state by its name: any
    name but those of the state's own attributes and methods (``commits``,
    ``lock``, ``commit``, ...) and names that begin with ``_``. Only these
    names are kept: an attribute set later is not part of the state.

Raises
------
ValueError
    When a value's name is one of the state's own, or begins with ``_``
    (mxplugin's ArgumentError, a ValueError): it would replace what the
    state keeps there.

Examples
--------
>>> import mxplugin as hvd
>>> hvd.init()
>>> state = hvd.elastic.ObjectState(epoch=0, seen=[])
>>> state.epoch = 1
>>> state.seen.append("a")
>>> state.commit()
>>> state.epoch = 2
>>> state.seen.append("b")
>>> state.restore()
>>> state.epoch, state.seen, state.commits
(1, ['a'], 1)
>>> state.sync()  # a collective: every rank takes rank 0's values
>>> state.epoch
1
"""

SECTIONS["ObjectState.snapshot"] = f"""
Parameters
----------
{_COMMITS}

Returns
-------
dict
    ``{{"commits": commits, "objects": {{name: deep copy of the value}}}}``.
"""

SECTIONS["ObjectState.apply"] = f"""
Parameters
----------
{_SNAPSHOT}
    Its values are copied again, so that the snapshot stays as committed.
"""

SECTIONS["ObjectState.sync"] = """
A collective: every rank calls it, at the same point. Then ``save()``: the
synced values are the ones to go back to.
"""

SECTIONS["GluonState"] = """
Horovod: none for MXNet; this is Gluon's counterpart of
``hvd.elastic.TorchState(model, optimizer, **kwargs)``, whose model and
optimizer are optional (here both are needed).

Parameters
----------
net : gluon.Block
    The network. Its parameters must be initialized, shapes known (run one
    forward pass first when they are deferred): the state takes a first
    snapshot now. They are kept by their structural names (``"0.weight"``),
    so a network built the same way in a new world matches.
trainer : DistributedTrainer or gluon.Trainer
    Its optimizer (learning rate, update count) and optimizer states are
    kept. With sharded or PowerSGD optimizer states, make the state on every
    rank at the same point: their snapshot is a collective.
**values : picklable objects
    Plain values kept as attributes, as by ``ObjectState`` (not named
    ``net`` or ``trainer``).

Raises
------
mxnet.gluon.parameter.DeferredInitializationError
    When a parameter of ``net`` is not initialized yet.

Examples
--------
>>> import mxnet as mx, mxplugin as hvd
>>> hvd.init()
>>> net = mx.gluon.nn.Dense(1, in_units=2)
>>> net.initialize()
>>> trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
>>> state = hvd.elastic.GluonState(net, trainer, epoch=0)
>>> state.sync()  # rank 0's parameters, optimizer states and values on every rank
>>> committed = net.weight.data().copy()
>>> with mx.autograd.record():
...     loss = net(mx.nd.ones((4, 2))).sum()
>>> loss.backward()
>>> trainer.step(4)
>>> state.restore()  # back to the last commit (here, the sync's)
>>> bool((net.weight.data() == committed).min())
True
"""

SECTIONS["GluonState.snapshot"] = f"""
Parameters
----------
{_COMMITS}

Returns
-------
dict
    The values' deep copies, the parameters as NumPy arrays by structural
    name, and the trainer's states as bytes, with ``"commits"``.
"""

SECTIONS["GluonState.apply"] = f"""
Parameters
----------
{_SNAPSHOT}
    Each parameter takes the snapshot's value, as an array of its own kind
    (NDArray or ``mxnet.numpy``).
"""

SECTIONS["GluonState.check_snapshot"] = """
Parameters
----------
snapshot : dict
    The snapshot ``loads`` is about to apply.

Raises
------
ValueError
    When it has no values for some parameter of this network (the first
    five are named).
"""

SECTIONS["GluonState.sync"] = """
A collective: every rank calls it, at the same point. The parameters are
broadcast, then the trainer's states and the values as objects; then
``save()``.
"""


def complete(namespace):
    """Attaches SECTIONS to the public names of `namespace` (a module's
    globals): "Name" is a class or function, "Name.member" a method."""
    for qualified, sections in SECTIONS.items():
        owner, _, member = qualified.partition(".")
        obj = vars(namespace[owner])[member] if member else namespace[owner]
        obj.__doc__ = f"{inspect.cleandoc(obj.__doc__ or '')}\n\n{inspect.cleandoc(sections)}\n"
