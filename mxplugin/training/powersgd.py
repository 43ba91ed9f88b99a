"""PowerSGD: low-rank gradient compression with error feedback (Vogels,
Karimireddy and Jaggi, NeurIPS 2019), for DistributedTrainer.

Compression.powersgd(rank=r) makes the trainer send, for every gradient
that is a big enough matrix, two rank-r factors instead of the matrix; the
other gradients travel through the ordinary bucket allreduce.

Note [PowerSGD step]: for a gradient G_w on rank w, seen as a matrix A
(rows x cols, rows <= cols: a conv kernel is out_channels x the rest, and a
matrix with more rows than columns is taken transposed, see Note [PowerSGD
orientation]), with its error buffer e_w and the factor Q (cols x r) of the
last step, the same on every rank:
  1. M_w = G_w + e_w                  (error feedback: what was not sent yet)
  2. P = sum_w M_w Q                  (allreduce, all tensors' P in one call)
  3. P^ = orthonormal basis of P      (LQ factorisation, linalg.gelqf)
  4. Q_w = M_w^T P^;  e_w = M_w - P^ Q_w^T   (this rank's residual)
  5. Q = sum_w Q_w                    (allreduce, all tensors' Q in one call)
  6. gradient = P^ Q^T = P^ P^^T sum_w M_w, and Q is kept for the next step.
Steps 1-2, 4 and 6 are each one pass over the gradients' memory, run by
the core (Note [PowerSGD passes] in src/compress/powersgd.h) for float32
gradients on the CPU, and by MXNet's operators otherwise (GPU, float16,
float64); step 3 is MXNet's LQ factorisation of the small P either way.
The reduced gradient is a sum, as the trainer's other gradients are (Note
[Reduced gradients are sums] in trainer.py); gradient_predivide_factor
scales Q's allreduce. The paper's error (step 4) is each rank's own
residual, so the errors summed over the ranks are exactly what the sent
gradient lacks of sum_w M_w.

Note [PowerSGD orientation]: with rows <= cols, a rank equal to rows
makes P^ a complete orthonormal basis of the rows, so P^ P^^T = I and the
compressed step equals the uncompressed one (whatever Q is: a warm-started
Q may lose rank). With rows > cols, P^ spans only the column space of P,
which a rank-deficient Q can shrink. Taking the matrix transposed costs
nothing: the products use dot's transpose flags.

Note [PowerSGD state across worlds]: Q is the same on every rank; the
error buffers are each rank's own. A checkpoint holds Q and the sum of the
errors over the ranks (a collective), and loading gives every rank of the
new world that sum divided by its size: the gradient still owed is owed in
full, however many ranks there are now.
"""
import numpy as np

import mxnet as mx

from mxplugin import calls
from mxplugin.errors import ArgumentError
from mxplugin.ops import Sum, grouped_allreduce, grouped_allreduce_by_context_

# Key of the PowerSGD state in a trainer's saved states dict: not an int, so
# gluon.Trainer's updater, which looks states up by parameter index, ignores it.
STATE_KEY = "mxplugin.powersgd"
_SEED = 20190530  # Q's first value, the same on every rank without a broadcast


class Factors:
    """One compressed gradient's state: its factor Q (stored transposed, r x
    cols of the oriented matrix) and this rank's error buffer (the
    gradient's shape, float32 for a float16 gradient: MXNet 1.9.1 has no
    float16 matrix product on CPU)."""

    def __init__(self, index, shape, dtype, ctx, rank):
        m, n = int(shape[0]), int(np.prod(shape[1:]))
        self.shape = (m, n)
        self.transposed = m > n  # Note [PowerSGD orientation]
        rows, cols = (n, m) if self.transposed else (m, n)
        self.rank = min(rank, rows)
        self.work_dtype = "float32" if np.dtype(dtype).name == "float16" else np.dtype(dtype).name
        rng = np.random.RandomState(_SEED + index)
        self.q = mx.nd.array(rng.standard_normal((self.rank, cols)), ctx=ctx, dtype=self.work_dtype)
        self.error = mx.nd.zeros(self.shape, ctx=ctx, dtype=self.work_dtype)
        # The gradient's matrix when it is in work_dtype, else a scratch one
        self.scratch = None if self.work_dtype == np.dtype(dtype).name else mx.nd.zeros(self.shape, ctx=ctx,
                                                                                        dtype=self.work_dtype)
        self.p = None
        self.kernel_p = None  # P's buffer of the core's passes (rank x rows), made at their first use

    def runs_in_core(self, grad):
        """Whether the core's passes take this gradient: float32 (its error
        buffer then too), dense, on the CPU."""
        return (self.scratch is None and self.work_dtype == "float32" and grad.context.device_type == "cpu"
                and grad.stype == "default")

    def core_matrix(self, grad, p):
        """This gradient's arrays as the core's passes take them."""
        return (grad, self.error, p, self.q, self.shape, self.rank)

    def p_of(self, m):
        """P^T = Q^T A^T (r x rows), A being M or M^T."""
        return mx.nd.dot(self.q, m, transpose_b=not self.transposed)

    def q_of(self, m, p_hat):
        """Q^T = P^^T A (r x cols), written into self.q."""
        mx.nd.dot(p_hat, m, transpose_b=self.transposed, out=self.q)

    def subtract_product(self, p_hat):
        """error -= P^ Q^T in one pass over the error (a GEMM that
        accumulates: the product is never written out on its own)."""
        first, second = (self.q, p_hat) if self.transposed else (p_hat, self.q)
        mx.nd.linalg.gemm(first, second, self.error, transpose_a=True, alpha=-1.0, beta=1.0, out=self.error)

    def product(self, p_hat, out):
        """The M that P^ Q^T stands for, written into `out` (m x n)."""
        first, second = (self.q, p_hat) if self.transposed else (p_hat, self.q)
        mx.nd.dot(first, second, transpose_a=True, out=out)


class PowerSGDReducer:
    """A trainer's PowerSGD state (Factors per compressed parameter index)
    and its reduction (Note [PowerSGD step])."""

    def __init__(self, config, name):
        self.config = config
        self.name = name
        self.factors = {}
        self.steps = 0  # reductions seen, warm-up ones included

    def in_warmup(self):
        """Counts a reduction; whether it is one of the uncompressed first ones."""
        self.steps += 1
        return self.steps <= self.config.warmup_steps

    def _factors(self, index, grad):
        f = self.factors.get(index)
        if f is None or f.error.context != grad.context or f.shape != (grad.shape[0], grad.size // grad.shape[0]):
            f = self.factors[index] = Factors(index, grad.shape, grad.dtype, grad.context, self.config.rank)
        return f

    def reduce(self, entries, process_set, prescale_factor=1.0):
        """Replaces each gradient of `entries` ((parameter index, gradient
        NDArray) pairs, every rank the same list) by its compressed sum over
        `process_set`, scaled by prescale_factor."""
        work = [(self._factors(index, grad), grad) for index, grad in entries]
        if work and all(f.runs_in_core(grad) for f, grad in work):
            return self._reduce_in_core(work, process_set, prescale_factor)
        return self._reduce_with_mxnet(work, process_set, prescale_factor)

    def _reduce_in_core(self, work, process_set, prescale_factor):
        """Note [PowerSGD step] with the core's passes (Note [PowerSGD
        passes] in src/compress/powersgd.h): one engine op per stage for
        every gradient, each stage one pass over the gradients' size."""
        core = calls.core_module()
        for f, grad in work:
            if f.kernel_p is None:
                f.kernel_p = mx.nd.zeros((f.rank, min(f.shape)), ctx=grad.context, dtype="float32")
        core.powersgd_stage(core.POWERSGD_ACCUMULATE, [f.core_matrix(grad, f.kernel_p) for f, grad in work])
        self._allreduce([f.kernel_p for f, _ in work], "p", process_set, 1.0)
        p_hats = [mx.nd.linalg.gelqf(f.kernel_p)[0] for f, _ in work]
        core.powersgd_stage(core.POWERSGD_RESIDUAL, [f.core_matrix(grad, p) for (f, grad), p in zip(work, p_hats)])
        self._allreduce([f.q for f, _ in work], "q", process_set, prescale_factor)
        core.powersgd_stage(core.POWERSGD_RECONSTRUCT,
                            [f.core_matrix(grad, p) for (f, grad), p in zip(work, p_hats)])

    def _reduce_with_mxnet(self, work, process_set, prescale_factor):
        """Note [PowerSGD step] in MXNet's operators: for gradients on a GPU,
        and float16 or float64 ones."""
        entries, work = work, []
        for f, grad in entries:
            matrix = grad.reshape(f.shape)
            if f.scratch is None:
                f.error += matrix
                out = matrix
            else:
                f.error += matrix.astype(f.work_dtype)
                out = f.scratch
            f.p = f.p_of(f.error)
            work.append((f, grad, out))
        self._allreduce([f.p for f, _, _ in work], "p", process_set, 1.0)
        for f, _, out in work:
            p_hat, _ = mx.nd.linalg.gelqf(f.p)
            f.p = p_hat
            f.q_of(f.error, p_hat)
            f.subtract_product(p_hat)  # this rank's own part leaves the error, before Q is summed
        self._allreduce([f.q for f, _, _ in work], "q", process_set, prescale_factor)
        for f, grad, out in work:
            f.product(f.p, out)
            if out is not grad:
                grad.reshape(f.shape)[:] = out.astype(grad.dtype)
            f.p = None

    def _allreduce(self, arrays, what, process_set, prescale):
        grouped_allreduce_by_context_(arrays, f"{self.name}powersgd.{what}", Sum, prescale_factor=prescale,
                                      process_set=process_set)

    # -- checkpoints (Note [PowerSGD state across worlds]) -------------------------
    def state_dict(self, process_set, world):
        """Picklable state: steps, and per index Q and the errors summed over
        the process set's ranks (a collective when `world`: every rank of
        the set must call it)."""
        indices = sorted(self.factors)
        errors = [self.factors[i].error for i in indices]
        if world and errors:
            errors = grouped_allreduce(errors, name=f"{self.name}powersgd.save", op=Sum, process_set=process_set)
        return {"steps": self.steps, "rank": self.config.rank,
                "factors": {i: {"q": self.factors[i].q.asnumpy(), "error_sum": e.asnumpy(),
                                "transposed": self.factors[i].transposed}
                            for i, e in zip(indices, errors)}}

    def load_state_dict(self, state, params, ranks):
        """Takes a state_dict() made at any world size: every one of `ranks`
        ranks gets the errors' sum / ranks. A Q of another rank is dropped
        (started afresh); an error of another shape is refused."""
        self.steps = int(state["steps"])
        self.factors = {}
        for index, saved in state["factors"].items():
            param = params[index]
            if not self.config.compresses(param):
                continue  # not compressed under these settings: its debt stays unpaid
            data = param.list_data()[0]
            f = self._factors(index, data)
            error = np.asarray(saved["error_sum"])
            if error.shape != f.shape:
                raise ArgumentError(f"PowerSGD state: the error buffer saved for parameter '{param.name}' has "
                                    f"shape {error.shape}, its gradient is {f.shape} as a matrix: were the states "
                                    "saved by another model?")
            f.error[:] = mx.nd.array(error / ranks, ctx=f.error.context, dtype=f.work_dtype)
            q = np.asarray(saved["q"])
            if q.shape == f.q.shape:
                f.q[:] = mx.nd.array(q, ctx=f.q.context, dtype=f.work_dtype)
