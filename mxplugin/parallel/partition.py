"""The partitioner: turns a serial Gluon network into a tensor-parallel one.

    net = build_serial_model()
    net.load_parameters("serial.params")          # or initialize(), or nothing yet
    parallel.parallelize(net, mesh, {"ffn.0": parallel.ColwiseParallel(),
                                     "ffn.2": parallel.RowwiseParallel(),
                                     "head": parallel.ShardedOutput()})

Note [Partitioning in place]
parallelize() replaces the children a plan names with tensor-parallel
blocks (placements.py) in their parents, under the same child names, so the
network's structural parameter names stay the serial ones and gather.py can
write a serial checkpoint. Each replacement takes this rank's slices of the
serial weights (or, uninitialised, draws the whole array as the serial block
would and keeps its slice), and the serial arrays are dropped with the serial
blocks. Everything is checked before anything changes: an error leaves the
network as it was. Every rank must call it alike; it makes no collective
call of its own (mesh=None builds default_mesh(), which is one, on first use).

Note [Imperative ancestors]
A split layer runs collectives imperatively, so no block above it may be
traced into a static graph. parallelize() refuses a network whose ancestors
of a split child are hybridized, and afterwards keeps those ancestors
imperative: their hybridize() only passes the call on to their children, so
net.hybridize() still hybridizes every block that holds no split layer
(layer norms, replicated Dense, whole sub-networks).
"""
import fnmatch
import types

from mxnet import gluon

from mxplugin import basics
from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_partition as ref
from mxplugin.parallel._reference import reference
from mxplugin.parallel._tree import ELEMENTWISE, SEQUENTIAL, Tree, child_path, describe, replace_child
from mxplugin.parallel.layers import _ParallelBlock
from mxplugin.parallel.mesh import default_mesh
from mxplugin.parallel.placements import Plan, Replicate, ShardedOutput
from mxplugin.parallel.plan_auto import auto_plan


def _is_pattern(key):
    return any(c in key for c in "*?[")


def _matches(pattern, path):
    """fnmatch per dotted segment: '*' never crosses a dot."""
    parts, pats = path.split("."), pattern.split(".")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pats))


def _missing_child(key, by_path):
    parts = key.split(".")
    for i in range(len(parts)):
        parent = ".".join(parts[:i])
        if ".".join(parts[:i + 1]) not in by_path:
            node = by_path[parent]
            children = ", ".join(node.block._children) or "none"
            where = f"'{parent}' ({describe(node.block)})" if parent else "the network"
            return f"plan entry '{key}': {where} has no child '{parts[i]}' (its children: {children})"
    return f"plan entry '{key}' names no child"


def _resolve(tree, plan):
    """[(node, placement, plan key)] in tree order, HeadParallel's children
    included; raises ArgumentError for names that match nothing or twice."""
    nodes, by_path = tree.nodes, tree.by_path
    chosen = {}  # path -> (placement, key)
    for key, placement in plan.placements.items():
        if _is_pattern(key):
            paths = [n.path for n in nodes if n.path and _matches(key, n.path)]
            if not paths:
                raise ArgumentError(f"plan pattern '{key}' matches no child of the network")
        elif key in by_path and key:
            paths = [key]
        else:
            raise ArgumentError(_missing_child(key, by_path) if key else "plan entry '': name a child, not the "
                                "network itself")
        for path in paths:
            if path in chosen:
                raise ArgumentError(f"child '{path}' is named by two plan entries: '{chosen[path][1]}' "
                                    f"({chosen[path][0]}) and '{key}' ({placement})")
            chosen[path] = (placement, key)
    for path, (placement, key) in list(chosen.items()):
        for child, implied in placement.children(by_path[path].block).items():
            sub = child_path(path, child)
            if sub in chosen:
                raise ArgumentError(f"child '{sub}' is split by {placement} on '{path}' and also named by plan "
                                    f"entry '{chosen[sub][1]}'")
            if sub in by_path:
                chosen[sub] = (implied, f"{key} ({type(placement).__name__})")
    return [(by_path[p], pl, k) for p, (pl, k) in tree.in_order(chosen)]


def _check_shared(entries, tree):
    """A split block must have one place in the tree and share no parameter."""
    for node, placement, _ in entries:
        if isinstance(placement, Replicate) or not node.block._reg_params:
            continue
        where = tree.places[id(node.block)]
        if len(where) > 1:
            raise ArgumentError(f"child '{node.path}' cannot be split: the same block is used twice, registered "
                                f"as {', '.join(repr(w) for w in where)}; give each place a block of its own")
        for param in node.block._reg_params.values():
            others = [owner.path for owner in tree.owners[id(param)] if owner.path != node.path]
            if others:
                raise ArgumentError(f"child '{node.path}' cannot be split: its parameter '{param.name}' is shared "
                                    f"with {', '.join(repr(o) for o in others)} (tied weights); untie them or "
                                    "leave both replicated")


def _check_entry(node, placement, mesh, tree):
    if isinstance(node.block, _ParallelBlock):
        raise ArgumentError(f"child '{node.path}' is already split ({type(node.block).__name__})")
    placement.check(node.path, node.block, mesh)
    for above in tree.ancestors(node):
        if isinstance(above.block, _ParallelBlock):
            raise ArgumentError(f"child '{node.path}' is inside the split layer '{above.path}'")
        if isinstance(above.block, gluon.HybridBlock) and above.block._active:
            where = f"'{above.path}'" if above.path else "the network"
            raise ArgumentError(
                f"child '{node.path}' cannot be split while {where} ({type(above.block).__name__}) is hybridized: "
                "a split layer runs collectives imperatively and cannot be part of a static graph. Call "
                "net.hybridize(False) before parallelize(); afterwards net.hybridize() hybridizes every block "
                "that holds no split layer, and the blocks above split layers run imperatively")


def _check_sequential(nodes, placements):
    """Note [Split features between layers] in placements.py, checked where the
    order of children is known: inside Sequential and HybridSequential (a
    nested one is read as part of its parent's sequence)."""

    def scan(path, container, split_by):
        for key, child in container._children.items():
            here = child_path(path, key)
            placement = placements.get(here)
            if isinstance(child, SEQUENTIAL) and placement is None:
                split_by = scan(here, child, split_by)
                continue
            consumes = placement is not None and placement.input_split
            if split_by is not None and not consumes and not isinstance(child, ELEMENTWISE):
                src, src_placement = split_by
                if isinstance(src_placement, ShardedOutput):
                    raise ArgumentError(
                        f"'{src}' (ShardedOutput) gives the network's split scores, but '{here}' "
                        f"({describe(child)}) comes after it: ShardedOutput must be the last layer (element-wise "
                        "blocks aside)")
                raise ArgumentError(
                    f"'{src}' ({src_placement}) leaves its output split over the mp group, but '{here}' "
                    f"({describe(child)}) comes next and needs whole features: follow '{src}' by a RowwiseParallel "
                    "Dense (activations and dropout may come between), or use ColwiseParallel(gather_output=True)")
            if consumes and split_by is None:
                raise ArgumentError(
                    f"'{here}' ({placement}) expects its input split over the mp group, but nothing before it in "
                    f"'{path or 'the network'}' splits it: split the Dense before it with ColwiseParallel(), or "
                    "use RowwiseParallel(input_is_parallel=False)")
            if consumes:
                split_by = None
            if placement is not None and placement.output_split:
                split_by = (here, placement)
        return split_by

    for node in nodes:
        nested = isinstance(node.parent, SEQUENTIAL) and node.path not in placements
        if not isinstance(node.block, SEQUENTIAL) or nested:
            continue
        split_by = scan(node.path, node.block, None)
        if split_by is not None and not isinstance(split_by[1], ShardedOutput):
            raise ArgumentError(
                f"'{split_by[0]}' ({split_by[1]}) leaves its output split over the mp group, and nothing after it "
                f"in '{node.path or 'the network'}' gathers it: follow it by a RowwiseParallel Dense, use "
                "ColwiseParallel(gather_output=True), or ShardedOutput() for a classifier")


def _imperative_hybridize(self, active=True, **kwargs):
    """Kept imperative by parallelize() (Note [Imperative ancestors]): passes
    hybridize() on to the children only."""
    gluon.Block.hybridize(self, active, **kwargs)


@reference(ref.PARALLELIZE)
def parallelize(net, mesh=None, plan="auto", verbose=False):
    """Splits the children of `net` that `plan` names over the mesh's
    model-parallel group, in place, and returns `net`.

    Each named child is replaced in its parent, under the same child name, by
    a tensor-parallel block holding this rank's slices of its weights, so the
    network's structural parameter names stay the serial ones (and
    save_serial_parameters writes a checkpoint the serial network loads).
    Everything is checked before anything changes: an error leaves the
    network as it was.

    Every rank calls it alike (same network, same plan); it makes no
    collective call of its own (only mesh=None, on first use, builds
    default_mesh(), which is one). Build trainers from net.collect_params()
    afterwards: the split children have new parameters. The blocks above a
    split layer run imperatively from then on: their hybridize() only passes
    the call on to their children, so net.hybridize() still hybridizes every
    block that holds no split layer. A network with such a block already
    hybridized is refused: call net.hybridize(False) first.
    """
    if not isinstance(net, gluon.Block):
        raise TypeError(f"parallelize takes a gluon Block, got {type(net).__name__}")
    mesh = mesh if mesh is not None else default_mesh()
    if isinstance(plan, str):
        if plan != "auto":
            raise ArgumentError(f"plan must be a dict of placements, a Plan or 'auto', got {plan!r}")
        plan = auto_plan(net, mesh)
    elif not isinstance(plan, Plan):
        plan = Plan(plan)
    if verbose and basics.rank() == 0:
        print(f"parallelize on {mesh}:\n{plan}", flush=True)
    tree = Tree(net)
    entries = _resolve(tree, plan)
    for node, placement, _ in entries:
        if not isinstance(placement, Replicate):
            _check_entry(node, placement, mesh, tree)
    _check_shared(entries, tree)
    _check_sequential(tree.nodes, {node.path: placement for node, placement, _ in entries})

    imperative = {}
    for node, placement, _ in entries:
        new = placement.replace(node.block, mesh)
        if new is None:
            continue
        new.label = node.path  # Note [Collective names] in layers.py
        replace_child(node.parent, node.key, node.block, new)
        for above in tree.ancestors(node):
            imperative[id(above.block)] = above.block
    for block in imperative.values():
        if isinstance(block, gluon.HybridBlock):
            object.__setattr__(block, "hybridize", types.MethodType(_imperative_hybridize, block))
    return net
