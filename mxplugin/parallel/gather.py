"""Serial checkpoints of a parallelized network: gather the split weights
into whole arrays under the serial network's structural names (what
gluon's save_parameters writes and load_parameters reads), and load such a
file back keeping each rank's slices.

    parallel.save_serial_parameters(net, "model.params")   # every rank calls
    serial = build_serial_model()
    serial.load_parameters("model.params")                 # plain Gluon

Gathering is a collective call over each mp group: every rank of the mesh
makes it, in the same order as its other collectives.

Under npx.set_np() the gathered arrays are mx.np.ndarrays, and the file is
written and read as the NumPy interface's save_parameters and
load_parameters write and read theirs (Note [Checkpoints and shape
semantics]).

Note [Checkpoints and shape semantics]
MXNet marks a file saved under NumPy shape semantics (npx.set_np()) and
refuses to load it without them. mx.nd.save refuses mx.np.ndarrays, so
save_serial_parameters saves legacy views of them (the same bytes, the same
mark as npx.save would write), which a serial network built under set_np
loads. load_serial_parameters reads, under set_np, a file saved without
those semantics too, as gluon's load_parameters does: by loading it with
them switched off for the call.
"""
import mxnet as mx
from mxnet.base import MXNetError

from mxplugin import basics
from mxplugin.array_kinds import legacy
from mxplugin.errors import ArgumentError
from mxplugin.parallel import _reference_partition as ref
from mxplugin.parallel._kinds import set_data
from mxplugin.parallel._reference import reference
from mxplugin.parallel._tree import child_path, walk
from mxplugin.parallel.layers import _ParallelBlock


@reference(ref.GATHER_SERIAL_PARAMETERS)
def gather_serial_parameters(net):
    """{structural name: whole NDArray on the CPU} of every parameter of a
    parallelized network (mx.np.ndarrays for a network built under
    npx.set_np()): split weights gathered over the mp group, the others as
    they are. The names are those of the serial network the
    partitioner started from. A collective call over every mp group."""
    arrays = {}
    for node in walk(net):
        prefix, block = node.path, node.block
        if isinstance(block, _ParallelBlock):
            whole = block.full_arrays()
        else:
            whole = {attr: p.list_data()[0] for attr, p in block._reg_params.items() if p._data is not None}
            missing = [attr for attr, p in block._reg_params.items() if p._data is None]
            if missing:
                raise ArgumentError(f"gather_serial_parameters: '{child_path(prefix, missing[0])}' is not "
                                    "initialised")
        for attr, data in whole.items():
            arrays[child_path(prefix, attr)] = data.as_in_context(mx.cpu())
    return arrays


@reference(ref.SAVE_SERIAL_PARAMETERS)
def save_serial_parameters(net, filename, root_rank=0):
    """Writes the whole parameters of a parallelized network to `filename`
    in gluon's format (ndarray.save of {structural name: array}), so that the
    serial network's load_parameters reads it. Every rank calls it (the
    gathers are collective); only global rank `root_rank` writes."""
    arrays = gather_serial_parameters(net)
    if basics.rank() == root_rank:
        # legacy views: mx.nd.save refuses NumPy arrays (Note [Checkpoints and shape semantics])
        mx.nd.save(filename, {name: legacy(array) for name, array in arrays.items()})


@reference(ref.LOAD_SERIAL_PARAMETERS)
def load_serial_parameters(net, filename, ctx=None):
    """Loads a serial checkpoint (from save_parameters of the serial network,
    or save_serial_parameters) into a parallelized network: each rank keeps
    its slices of the split weights. Parameters not yet initialised are
    initialised on `ctx` (default: the current context). Names must match
    both ways; an ArgumentError names the first that does not. Makes no
    collective call: every rank reads the file."""
    loaded = _load(filename)
    if not isinstance(loaded, dict):
        raise ArgumentError(f"{filename} holds a list of arrays, not named parameters")
    loaded = {k[4:] if k.startswith(("arg:", "aux:")) else k: v for k, v in loaded.items()}
    ctx = ctx if ctx is not None else mx.context.current_context()
    expected = set()
    for node in walk(net):
        prefix, block = node.path, node.block
        if not block._reg_params:
            continue
        names = {attr: child_path(prefix, attr) for attr in block._reg_params}
        for attr, name in names.items():
            if name not in loaded:
                raise ArgumentError(f"{filename} has no parameter '{name}' (the network's {block.name} needs it)")
            expected.add(name)
            param = block._reg_params[attr]
            if param._data is None:
                param.initialize(init=mx.init.Zero(), ctx=ctx)
        if isinstance(block, _ParallelBlock):
            block.load_full_arrays({attr: loaded[name] for attr, name in names.items()})
        else:
            for attr, name in names.items():
                param, value = block._reg_params[attr], loaded[name]
                if all(param.shape) and tuple(param.shape) != value.shape:
                    raise ArgumentError(f"{filename}: '{name}' has shape {value.shape}, the network's "
                                        f"{param.name} {tuple(param.shape)}")
                set_data(param, value)
    extra = sorted(set(loaded) - expected)
    if extra:
        raise ArgumentError(f"{filename} has parameters the network lacks: {', '.join(extra[:5])}"
                            f"{' ...' if len(extra) > 5 else ''}")


def _load(filename):
    """mx.nd.load(filename), also of a file saved without NumPy shape
    semantics while they are on (Note [Checkpoints and shape semantics])."""
    try:
        return mx.nd.load(filename)
    except MXNetError as e:
        if "is_np_shape" not in str(e):
            raise
    with mx.util.np_array(False), mx.util.np_shape(False):
        return mx.nd.load(filename)
