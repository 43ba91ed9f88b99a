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

    def ancestors(self, nodes_by_path):
        """The nodes above this one, root first."""
        parts = self.path.split(".") if self.path else []
        return [nodes_by_path[".".join(parts[:i])] for i in range(len(parts))]


def child_path(path, key):
    return f"{path}.{key}" if path else key


def walk(root):
    """Every place of every block, pre-order, children in registration order.
    A block registered twice appears twice."""
    out = []

    def visit(path, block, parent, key):
        out.append(Node(path, block, parent, key))
        for name, child in block._children.items():
            visit(child_path(path, name), child, block, name)

    visit("", root, None, None)
    return out


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
