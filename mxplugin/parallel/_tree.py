"""A Gluon network as a tree of named children: the paths the partitioner's
plans name, which are also the structural parameter names of
save_parameters/load_parameters ("encoder.attn.query" holds
"encoder.attn.query.weight")."""
from mxnet import gluon

SEQUENTIAL = (gluon.nn.Sequential, gluon.nn.HybridSequential)

# Children that act on each feature alone, so they may sit between a
# column-split Dense and the row-split one that consumes its output.
ELEMENTWISE = (gluon.nn.Activation, gluon.nn.Dropout, gluon.nn.LeakyReLU, gluon.nn.ELU, gluon.nn.SELU,
               gluon.nn.GELU, gluon.nn.Swish)


class Node:
    """One place of a block in the tree: `block` registered as child `key` of
    `parent` (None for the root), at dotted `path` ("" for the root)."""
    __slots__ = ("path", "block", "parent", "key")

    def __init__(self, path, block, parent, key):
        self.path, self.block, self.parent, self.key = path, block, parent, key


def child_path(path, key):
    return f"{path}.{key}" if path else key


def walk(root):
    """Every place of every block, pre-order, children in registration order
    (as gluon's _collect_params_with_prefix walks them for structural
    names). A block registered twice appears twice."""
    out = []

    def visit(path, block, parent, key):
        out.append(Node(path, block, parent, key))
        for name, child in block._children.items():
            visit(child_path(path, name), child, block, name)

    visit("", root, None, None)
    return out


class Tree:
    """The facts of a network's tree the partitioner reads, computed once:
    its places in pre-order (`nodes`), the first place of each path
    (`by_path`), each path's position in tree order (`order`), every path a
    block is registered at (`places`, by block id) and every place whose
    block registers a parameter (`owners`, by parameter id)."""

    def __init__(self, root):
        self.nodes = walk(root)
        self.by_path, self.places, self.owners = {}, {}, {}
        for node in self.nodes:
            self.by_path.setdefault(node.path, node)
            self.places.setdefault(id(node.block), []).append(node.path)
            for param in node.block._reg_params.values():
                self.owners.setdefault(id(param), []).append(node)
        self.order = {node.path: i for i, node in enumerate(self.nodes)}

    def ancestors(self, node):
        """The nodes above `node`, root first."""
        parts = node.path.split(".") if node.path else []
        return [self.by_path[".".join(parts[:i])] for i in range(len(parts))]

    def in_order(self, by_path):
        """The (path, value) items of `by_path` sorted in tree order."""
        return sorted(by_path.items(), key=lambda kv: self.order[kv[0]])

    def shared_blocks(self):
        """Ids of the blocks that cannot be split alone: registered at two
        places, or sharing a parameter with another block (tied weights)."""
        shared = {b for b, paths in self.places.items() if len(paths) > 1}
        for nodes in self.owners.values():
            blocks = {id(node.block) for node in nodes}
            if len(blocks) > 1:
                shared |= blocks
        return shared


def runs_forward_of(block, cls):
    """Whether `block` is a `cls` that runs `cls`'s own forward (a subclass
    overriding it would not run as the split layer replacing it does)."""
    return isinstance(block, cls) and type(block).hybrid_forward is cls.hybrid_forward


def describe(block):
    """A short description of a block for messages: "Dense(16 -> 8)"."""
    if isinstance(block, gluon.nn.Dense):
        units, in_units = block.weight.shape
        return f"Dense({in_units or '?'} -> {units})"
    if isinstance(block, gluon.nn.Embedding):
        return f"Embedding({block._kwargs['input_dim']} -> {block._kwargs['output_dim']})"
    return type(block).__name__


def replace_child(parent, key, old, new):
    """Puts `new` where `old` was registered as `parent`'s child `key`, and in
    every attribute of `parent` that held `old`. Block.__setattr__ refuses to
    change an attribute's type (Dense -> ColumnParallelDense), so the
    attributes are set directly."""
    parent._children[key] = new
    for name, value in list(vars(parent).items()):
        if value is old:
            object.__setattr__(parent, name, new)
    if isinstance(parent, gluon.HybridBlock):
        parent._clear_cached_op()
