"""Gradients added up over several backward passes before one reduction
(backward_passes_per_step, Horovod's name), for DistributedTrainer and
DistributedOptimizer: Note [Accumulated passes]."""
from mxplugin.errors import ArgumentError
from mxplugin.training import sparse_rows

# Note [Accumulated passes]: with backward_passes_per_step=K the training
# loop stays Gluon's own (backward, then step() or the optimizer's update,
# every pass). K-1 of every K calls only add the pass's gradients to a
# local sum and zero them, so that a parameter the next pass does not use
# adds nothing (grad_req='write' leaves a gradient it did not write as it
# was); the K-th adds the sum back, reduces once and updates with the batch
# sizes of the K passes summed: the weights of one process on the combined
# batch of every rank's K passes, with one reduction in K. A weight's
# freshness (used by a backward since its last update) carries over the
# passes, as gluon.Trainer resets it only when it updates. Parameters that
# accumulate themselves (grad_req='add', a user's own loop) or travel as
# rows (row_sparse gradients) are refused: they would be added twice, or
# need a sum of rows.


def passes_per_step(value):
    """`value` as backward_passes_per_step, or ArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"backward_passes_per_step must be an integer >= 1, got {value!r}")
    return value


def refuse_own_accumulation(params, where):
    """ArgumentError naming the parameters that cannot be accumulated here."""
    adding = [p.name for p in params if p.grad_req == "add"]
    if adding:
        raise ArgumentError(
            f"{where}: backward_passes_per_step adds the gradients of the passes itself, but parameters "
            f"{', '.join(adding[:3])}{', ...' if len(adding) > 3 else ''} have grad_req='add' (gradients "
            "your own loop adds up): use one or the other; with grad_req='add', call step() every K passes "
            "and zero the gradients yourself")
    sparse = [p.name for p in params if p.grad_req != "null" and any(
        sparse_rows.is_row_sparse(g) for g in p.list_grad())]
    if sparse:
        raise ArgumentError(f"{where}: backward_passes_per_step does not combine with row_sparse gradients "
                            f"({', '.join(sparse[:3])}): pass sparse_as_dense=True, or backward_passes_per_step=1")


class PassSums:
    """The local sums of gradients over the passes of one step (Note
    [Accumulated passes]), keyed by what the caller names each array."""

    def __init__(self, passes):
        self.passes = passes
        self.count = 0        # passes seen since the last step that reduced
        self.batch_size = 0   # their batch sizes, summed
        self.sums = {}        # key -> the sum of the earlier passes' gradients

    def add(self, arrays, batch_size=0):
        """Adds this pass's `arrays` ({key: gradient}) and zeros them;
        whether this pass ends the step (then nothing is added: restore()
        follows)."""
        self.count += 1
        self.batch_size += batch_size
        if self.count >= self.passes:
            return True
        for key, grad in arrays.items():
            if key in self.sums:
                self.sums[key] += grad
            else:
                self.sums[key] = grad.copy()
            grad[:] = 0
        return False

    def restore(self, arrays):
        """Adds the sums of the earlier passes into the last pass's `arrays`
        and starts the next step; returns the batch sizes of its passes summed."""
        for key, grad in arrays.items():
            held = self.sums.pop(key, None)
            if held is not None:
                grad += held.as_in_context(grad.context)
        self.sums.clear()
        total, self.count, self.batch_size = self.batch_size, 0, 0
        return total


def layout_arrays(layout):
    """The gradients a trainer's layout reduces: {key: array}."""
    arrays = {("bucket", i): b.grad for i, b in enumerate(layout.buckets)}
    for index, p in layout.excluded:
        for k, g in enumerate(p.list_grad()):
            arrays[("param", index, k)] = g
    return arrays


def as_lists(index, grad):
    """An optimizer update's index and gradient, as lists (MXNet's updater
    passes lists where the optimizer aggregates)."""
    if isinstance(index, (list, tuple)):
        return list(index), list(grad)
    return [index], [grad]

