"""ProcessMesh: the world as a dp x mp grid of ranks, and the parameter
helpers that follow from it (distributed marks, broadcast, gradient averaging).

Note [Mesh layout]
Rank r sits at row r // mp, column r % mp of a dp x mp grid:

    mp group (a row):     ranks (r // mp) * mp ... (r // mp) * mp + mp - 1
    dp group (a column):  ranks with the same r % mp

Model-parallel partners are neighbours in rank order, so on machines with
consecutive local ranks the chatty tensor-parallel traffic stays inside a
machine, while the once-per-step gradient averaging crosses machines.
"""
import re

import mxnet as mx

from mxplugin import basics, ops
from mxplugin.basics import global_process_set
from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_mesh as ref
from mxplugin.parallel._reference import reference

_sets = {}  # sorted rank tuple -> ProcessSet this module registered or found


def _registered(ps):
    if ps.process_set_id is None:
        return False
    try:
        return basics._core().process_set_ranks(ps.process_set_id) == ps.ranks
    except ValueError:
        return False


def _existing_set(ranks, error):
    """The registered set with these ranks that made add_process_set refuse a
    duplicate (registered earlier by the user)."""
    match = re.search(r"\(id (\d+)\)", str(error))
    if match:
        ps = basics.ProcessSet(ranks)
        ps.process_set_id = int(match.group(1))
        if _registered(ps):
            return ps
    raise error


def _process_set(ranks):
    """A registered ProcessSet for `ranks`. A collective call (every rank makes
    the same calls in the same order): registers the set unless the global set
    or an earlier registration already covers these ranks."""
    ranks = sorted(ranks)
    if ranks == list(range(basics.size())):
        return global_process_set
    key = tuple(ranks)
    cached = _sets.get(key)
    if cached is not None and _registered(cached):
        return cached
    try:
        ps = basics.add_process_set(basics.ProcessSet(ranks))
    except ValueError as e:
        ps = _existing_set(ranks, e)
    _sets[key] = ps
    return ps


@reference(ref.PROCESS_MESH)
class ProcessMesh:
    """The world's ranks as a dp x mp grid: dp replicas of the model, each
    split into mp shards. Rank r holds shard r % mp (its mp_rank) of replica
    r // mp (its dp_rank): the ranks of a model-parallel group are
    consecutive, so on machines with consecutive local ranks the frequent
    tensor-parallel traffic stays inside a machine, while the once-a-step
    gradient averaging over a data-parallel group crosses machines.

    Constructing a mesh is a collective call: every rank must construct it,
    in the same order relative to other collectives, because it registers all
    dp groups and then all mp groups as process sets (groups of the whole
    world reuse `global_process_set`; meshes with the same groups share them).
    """

    def __init__(self, dp, mp):
        for label, v in (("dp", dp), ("mp", mp)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ArgumentError(f"ProcessMesh: {label} must be a positive int, got {v!r}")
        size = basics.size()
        if dp * mp != size:
            raise ArgumentError(f"ProcessMesh: dp * mp = {dp} * {mp} = {dp * mp}, but there are {size} ranks")
        self._dp, self._mp = dp, mp
        self._rank = basics.rank()
        self._dp_sets = [_process_set(self.dp_group_ranks(j)) for j in range(mp)]
        self._mp_sets = [_process_set(self.mp_group_ranks(i)) for i in range(dp)]

    @property
    def dp(self):
        """Number of model replicas (size of each data-parallel group)."""
        return self._dp

    @property
    def mp(self):
        """Number of shards of each model (size of each model-parallel group)."""
        return self._mp

    @property
    def dp_rank(self):
        """The replica this rank belongs to (its rank within its dp group)."""
        return self._rank // self._mp

    @property
    def mp_rank(self):
        """The shard this rank holds (its rank within its mp group)."""
        return self._rank % self._mp

    @property
    def dp_set(self):
        """ProcessSet of the ranks holding the same shard as this one."""
        return self._dp_sets[self.mp_rank]

    @property
    def mp_set(self):
        """ProcessSet of the ranks that together hold one replica of the model."""
        return self._mp_sets[self.dp_rank]

    @reference(ref.DP_GROUP_RANKS)
    def dp_group_ranks(self, mp_rank):
        """Global ranks of the dp group of shard `mp_rank`."""
        return [i * self._mp + mp_rank for i in range(self._dp)]

    @reference(ref.MP_GROUP_RANKS)
    def mp_group_ranks(self, dp_rank):
        """Global ranks of the mp group of replica `dp_rank`."""
        return list(range(dp_rank * self._mp, (dp_rank + 1) * self._mp))

    def __repr__(self):
        return f"ProcessMesh(dp={self._dp}, mp={self._mp}, rank={self._rank})"


_default = {}


@reference(ref.DEFAULT_MESH)
def default_mesh():
    """The mesh ProcessMesh(dp=1, mp=size()), one model split over every
    rank, which the layers, the loss and the partitioner use when given no
    mesh. Built on first use, a collective call: every rank must make its
    first use at the same point of its collectives."""
    size = basics.size()
    mesh = _default.get(size)
    if mesh is None:
        mesh = _default[size] = ProcessMesh(1, size)
    return mesh


@reference(ref.MARK_DISTRIBUTED)
def mark_distributed(param):
    """Marks a Parameter as a model-parallel shard (`param.distributed =
    True`): its value differs across the ranks of an mp group, so
    mxplugin.broadcast_parameters skips it, broadcast_parameters of this
    package broadcasts it within its data-parallel group only, and a
    DistributedTrainer without `mesh=` updates it from this rank's gradient
    alone. The parallel layers mark their shards themselves."""
    if not isinstance(param, mx.gluon.Parameter):
        raise TypeError(f"mark_distributed takes a gluon Parameter, got {type(param).__name__}")
    param.distributed = True
    return param


def _param_items(params):
    if isinstance(params, (list, tuple)):
        return sorted(((p.name, p) for p in params), key=lambda kv: kv[0])
    if hasattr(params, "items"):
        return sorted(params.items(), key=lambda kv: kv[0])
    raise TypeError(f"params must be a dict, ParameterDict or list of Parameters, got {type(params).__name__}")


@reference(ref.BROADCAST_PARAMETERS)
def broadcast_parameters(params, mesh, root_rank=0):
    """Makes a mesh's replicas start equal, in place. Replicated parameters
    come from global rank `root_rank` (over the world, as
    mxplugin.broadcast_parameters); each shard marked distributed comes from
    the rank of its dp group in the same replica as `root_rank`. A collective
    call: every rank makes it."""
    items = _param_items(params)
    replicated = {k: p for k, p in items if not getattr(p, "distributed", False)}
    basics._core()
    if replicated:
        from mxplugin.functions import broadcast_parameters as broadcast_replicated

        broadcast_replicated(replicated, root_rank=root_rank)
    if mesh.dp == 1:
        return
    root = (root_rank // mesh.mp) * mesh.mp + mesh.mp_rank
    for key, p in items:
        if getattr(p, "distributed", False):
            for data in p.list_data():
                ops.broadcast_(data, root, name=f"parallel.shard.{key}", process_set=mesh.dp_set)


@reference(ref.ALLREDUCE_GRADIENTS)
def allreduce_gradients(params, mesh, name="parallel.grads"):
    """Averages the gradients of all `params` (shards and replicated ones) over
    the mesh's data-parallel group, in place, as one grouped allreduce.

    What a data-parallel trainer must do under tensor parallelism: the ranks of
    an mp group hold the same loss, so replicated parameters already have the
    full gradient of their replica and shards the gradient of their slice.
    DistributedTrainer(mesh=...) does it itself; this is for a hand-written
    training loop (with gluon.Trainer(kvstore=None))."""
    grads = [g for _, p in _param_items(params) if p.grad_req != "null" for g in p.list_grad()]
    if mesh.dp == 1 or not grads:
        return
    ops.grouped_allreduce_(grads, op=ops.Average, name=name, process_set=mesh.dp_set)
