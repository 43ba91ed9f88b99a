"""Note [Autotune]: DistributedTrainer(..., autotune=True), or
MXPLUGIN_AUTOTUNE=1, measures the job's own first steps under several gradient
bucket sizes and keeps the fastest.

  - What it changes: bucket_bytes only, the one choice that is safe to change
    between steps and leaves the numbers as they are. A bucket is a run of
    gradients reduced by one allreduce and updated by one fused call; each
    element is summed over the same ranks and updated by the same element-wise
    rule whatever run it sits in (shared-memory reductions may sum a 3-rank
    element in another order: float tolerance). The core's fusion threshold,
    cycle time and thread level are agreed at init and stay.
  - Candidates: the bucket_bytes given, and the total gradient bytes divided
    by 1, 2, 4, ... 32 (so a small model gets several cuts too); sizes that
    cut every parameter group the same way as one tried before are skipped,
    costing no steps.
  - Measuring: a step's time is from one reduction (step() or
    allreduce_grads()) to the next, so it holds the forward and backward
    between them, where communication overlaps. After WARMUP steps, each
    candidate gets one step to settle (the new layout is built at its first
    reduction, and graphs hybridized with static_shape bind its buffers) and
    then STEPS_PER_SAMPLE steps, of which the median counts.
  - Agreeing: every rank must cut the same buckets at the same step. Ranks
    switch at the same reduction (they count alike) and the choice comes from
    one allreduce (Max) of every rank's medians: the slowest rank's step is
    the job's step, and every rank computes the same argmin from the same
    numbers. The settings themselves are compared at the first reduction,
    with the parameters: ranks that disagree fail there, naming themselves.
  - Telling: rank 0 prints one line with the choice and the figures behind
    it, and writes every candidate's figures to MXPLUGIN_AUTOTUNE_LOG (CSV).
  - Not tuned: local SGD (its steps reduce no gradients), num_groups > 0 (the
    group count, not the byte size, cuts the buckets), and a lone process.
"""
import csv
import logging
import os
import statistics
import sys
import time

import mxnet as mx

from mxplugin.errors import ArgumentError, values_by_rank
from mxplugin.ops import Max, allreduce
from mxplugin.training.buckets import cut_runs

DIVISORS = (1, 2, 4, 8, 16, 32)
_log = logging.getLogger(__name__)


def _env(name, default):
    """MXPLUGIN_<name>, else HOROVOD_<name> (the alias every setting has), else default."""
    for prefix in ("MXPLUGIN_", "HOROVOD_"):
        value = os.environ.get(prefix + name)
        if value not in (None, ""):
            return value
    return default


def _env_count(name, default, least):
    text = _env(name, str(default))
    try:
        value = int(text)
    except ValueError:
        raise ArgumentError(f"MXPLUGIN_{name} must be an integer, got {text!r}") from None
    if value < least:
        raise ArgumentError(f"MXPLUGIN_{name} must be at least {least}, got {value}")
    return value


class Settings:
    """The tuning asked for on this rank: compared across ranks at the first reduction."""

    def __init__(self, requested):
        if requested is None:
            requested = _env("AUTOTUNE", "0").strip().lower() in ("1", "true", "yes", "on")
        elif not isinstance(requested, bool):
            raise TypeError(f"autotune must be True, False or None (MXPLUGIN_AUTOTUNE), got {requested!r}")
        self.enabled = requested
        self.warmup = _env_count("AUTOTUNE_WARMUP_STEPS", 5, 0) if requested else 0
        self.steps = _env_count("AUTOTUNE_STEPS_PER_SAMPLE", 10, 1) if requested else 0
        self.log_path = _env("AUTOTUNE_LOG", None) if requested else None

    def signature(self):
        return (self.enabled, self.warmup, self.steps)


def describe(signature):
    enabled, warmup, steps = signature
    if not enabled:
        return "autotune off"
    return f"autotune on ({warmup} warm-up steps, {steps} steps per sample)"


class BucketTuner:
    """Drives one trainer's tuning from its reductions (tick), then stays out of the way."""

    def __init__(self, settings, prefix):
        self.settings = settings
        self.prefix = prefix
        self.done = not settings.enabled
        self.chosen = None  # bucket_bytes kept, once done
        self._reductions = 0
        self._last = None  # time of the previous reduction
        self._candidates = None  # [(bucket_bytes, cut)] to measure, in order
        self._index = -1  # candidate measured now
        self._left = 0  # reductions before the next switch
        self._times = []  # [[seconds, ...] per candidate]

    def stop(self, why):
        """Tuning does not apply to this trainer (why, for the log); nothing to agree on."""
        if not self.done and why:
            _log.info("autotune: not tuning %s: %s", self.prefix, why)
        self.done = True

    def tick(self, trainer):
        """Called at the start of every reduction, on every rank alike;
        returns the bucket_bytes to use from this reduction on, or None to
        keep the current one."""
        if self.done:
            return None
        now = time.perf_counter()
        elapsed = None if self._last is None else now - self._last
        self._last = now
        self._reductions += 1
        if self._candidates is None:
            if self._reductions <= self.settings.warmup:
                return None
            self._candidates = self._list_candidates(trainer)
            self._times = [[] for _ in self._candidates]
            return self._next()
        if self._left <= self.settings.steps and elapsed is not None:  # the settling step is not counted
            self._times[self._index].append(elapsed)
        self._left -= 1
        if self._left > 0:
            return None
        if self._index + 1 < len(self._candidates):
            return self._next()
        return self._finish(trainer)

    def _next(self):
        self._index += 1
        self._left = self.settings.steps + 1
        return self._candidates[self._index][0]

    def _list_candidates(self, trainer):
        groups = trainer._layout.group_sizes
        total = sum(sum(sizes) for sizes in groups)
        out, cuts = [], set()
        for bucket_bytes in [trainer._bucket_bytes] + [total // k + 1 for k in DIVISORS]:
            cut = tuple(tuple(cut_runs(sizes, bucket_bytes)) for sizes in groups)
            if cut not in cuts:
                cuts.add(cut)
                out.append((bucket_bytes, cut))
        return out

    def _finish(self, trainer):
        mine = [statistics.median(t) for t in self._times]
        ps = trainer._process_set
        agreed = allreduce(mx.nd.array(mine, dtype="float64"), op=Max, name=f"{self.prefix}autotune",
                           process_set=ps).asnumpy().tolist()
        best = min(range(len(agreed)), key=lambda i: (agreed[i], i))
        self.chosen = self._candidates[best][0]
        self.done = True
        if ps.rank() == 0:
            self._tell(agreed, best)
        return self.chosen

    def _tell(self, agreed, best):
        buckets = [sum(len(runs) for runs in cut) for _, cut in self._candidates]
        first = agreed[0]
        print(f"mxplugin autotune ({self.prefix.rstrip('.')}): bucket_bytes {self.chosen} ({buckets[best]} "
              f"bucket(s)), {agreed[best] * 1e3:.2f} ms a step against {first * 1e3:.2f} ms with the "
              f"bucket_bytes given ({self._candidates[0][0]}, {buckets[0]} bucket(s)); tried "
              f"{len(agreed)} sizes, {self.settings.steps} steps each, the slowest rank's medians",
              file=sys.stderr, flush=True)
        if not self.settings.log_path:
            return
        new = not os.path.exists(self.settings.log_path)
        with open(self.settings.log_path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["trainer", "bucket_bytes", "buckets", "steps", "median_step_seconds", "chosen"])
            for i, (bucket_bytes, _) in enumerate(self._candidates):
                w.writerow([self.prefix.rstrip("."), bucket_bytes, buckets[i], len(self._times[i]),
                            f"{agreed[i]:.6g}", int(i == best)])


def disagreement(everyone, process_set):
    """The ArgumentError when the ranks' tuning settings (Settings.signature()
    of each) differ, else None."""
    ranks = process_set.ranks or list(range(len(everyone)))
    detail = values_by_rank(ranks, [tuple(s) for s in everyone], [describe(s) for s in everyone])
    if not detail:
        return None
    return ArgumentError(f"DistributedTrainer: the ranks asked for different tuning: {detail}. Set autotune= "
                         "(or MXPLUGIN_AUTOTUNE, MXPLUGIN_AUTOTUNE_WARMUP_STEPS, "
                         "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE) alike on every rank.")

