"""auto_plan: a tensor-parallel plan read from the network's structure.

Note [What auto splits]
Only what is safe to read from structure alone:
- In every Sequential/HybridSequential, a Dense followed by element-wise
  blocks (activations, dropout) and another Dense is split column- then
  row-wise: the hidden features stay split between them, one allreduce
  forward and one backward per pair. Pairs do not overlap and are taken
  from the front.
- The final classifier: the network's last layer (following the last child
  of Sequential blocks), when it is a Dense that widens (more classes than
  input features) and whose weight is at least as large as every other
  Dense weight (classifier="auto"), or whenever it divides (True), gets
  ShardedOutput: the scores stay split, for ShardedSoftmaxCrossEntropyLoss.
  It is decided first, so it never becomes the second half of a pair. A
  feed-forward block's closing Dense narrows (4096 -> 1024) and is not taken
  for a classifier.
A block with its own forward is opaque here (its data flow is not known), so
attention is never split automatically: name it with HeadParallel.
Each choice, and each pair passed over, is explained in Plan.notes.
"""
from mxnet import gluon

from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_partition as ref
from mxplugin.parallel._reference import reference
from mxplugin.parallel._tree import ELEMENTWISE, SEQUENTIAL, Tree, child_path, describe, runs_forward_of
from mxplugin.parallel.layers import _ParallelBlock
from mxplugin.parallel.mesh import default_mesh
from mxplugin.parallel.placements import ColwiseParallel, Plan, RowwiseParallel, ShardedOutput


def _plain_dense(block):
    return runs_forward_of(block, gluon.nn.Dense)


def _why_not(block, width, what, mesh, shared):
    """Why `block` cannot be split along `what` (None when it can)."""
    if id(block) in shared:
        return "used at two places or sharing parameters"
    if not block.weight.shape[1]:
        return "in_units unknown (deferred initialisation)"
    if width % mesh.mp:
        return f"{what}={width} not divisible by mp={mesh.mp}"
    return None


def _final_layer(net):
    path, block = "", net
    while isinstance(block, SEQUENTIAL) and block._children:
        key, block = list(block._children.items())[-1]
        path = child_path(path, key)
    return path, block


@reference(ref.AUTO_PLAN)
def auto_plan(net, mesh=None, classifier="auto"):
    """The Plan that parallelize(net, mesh, "auto") applies; print it to see
    what was chosen and why.

    It splits only what is safe to read from the network's structure: in
    every Sequential or HybridSequential, a Dense followed by element-wise
    blocks (activations, dropout) and another Dense, column- then row-wise
    (one allreduce forward and one backward a pair; pairs taken from the
    front, never overlapping); and the final classifier (the last layer,
    following the last child of Sequential blocks) as ShardedOutput, for
    ShardedSoftmaxCrossEntropyLoss. A block with its own forward is opaque,
    so attention is never split automatically: name it with HeadParallel."""
    if classifier not in ("auto", True, False):
        raise ArgumentError(f"auto_plan: classifier must be 'auto', True or False, got {classifier!r}")
    mesh = mesh if mesh is not None else default_mesh()
    tree = Tree(net)
    nodes = tree.nodes
    shared = tree.shared_blocks()
    placements, notes = {}, []

    final_path, final = _final_layer(net)
    if classifier is not False and final_path and _plain_dense(final):
        units = final.weight.shape[0]
        largest = max(n.block.weight.shape[0] * n.block.weight.shape[1] for n in nodes if _plain_dense(n.block))
        why = _why_not(final, units, "units", mesh, shared)
        if why is None and classifier == "auto":
            if units <= final.weight.shape[1]:
                why = "it does not widen (classes <= input features; classifier=True shards it anyway)"
            elif units * final.weight.shape[1] < largest:
                why = "its weight is not the largest Dense weight (classifier=True shards it anyway)"
        if why is None:
            placements[final_path] = ShardedOutput()
            notes.append(f"{final_path}: final classifier {describe(final)}: classes split over mp={mesh.mp}; "
                         "train with ShardedSoftmaxCrossEntropyLoss")
        else:
            notes.append(f"{final_path}: final classifier {describe(final)} left replicated: {why}")

    for node in nodes:
        if not isinstance(node.block, SEQUENTIAL) or isinstance(node.block, _ParallelBlock):
            continue
        children = list(node.block._children.items())
        i = 0
        while i < len(children):
            first_path = child_path(node.path, children[i][0])
            first = children[i][1]
            j = i + 1
            while j < len(children) and isinstance(children[j][1], ELEMENTWISE):
                j += 1
            if (not _plain_dense(first) or j == len(children) or not _plain_dense(children[j][1])
                    or first_path in placements):
                i += 1
                continue
            second_path, second = child_path(node.path, children[j][0]), children[j][1]
            if second_path in placements:
                i += 1
                continue
            why = (_why_not(first, first.weight.shape[0], "units", mesh, shared)
                   or _why_not(second, second.weight.shape[1], "in_units", mesh, shared))
            if why is None and second._flatten and not first._flatten:
                why = "the second Dense flattens its input (flatten=True) while the first keeps its shape"
            pair = f"{first_path} -> {second_path}: {describe(first)} then {describe(second)}"
            if why is not None:
                notes.append(f"{pair} left replicated: {why}")
                i += 1
                continue
            placements[first_path], placements[second_path] = ColwiseParallel(), RowwiseParallel()
            notes.append(f"{pair}: column- then row-wise, hidden features split, one allreduce forward and one "
                         "backward")
            i = j + 1
    return Plan(dict(tree.in_order(placements)), notes)
