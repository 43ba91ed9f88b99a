"""Each rank's own random streams for GluonTS training.

Note [Per-rank sampling seeds]: GluonTS draws training windows with NumPy's
global generator (the instance samplers), shuffles with Python's `random`
and draws dropout masks and initial weights with MXNet's. A training script
seeds them alike on every rank, or not at all; either way data parallelism
needs each rank to draw its own windows, or N ranks would train on N copies
of one batch. So when training starts, rank 0 draws a base seed from its
NumPy generator, every rank receives it, and each seeds all three
generators with a seed mixed from (base, rank). A job whose rank 0 was
seeded is then reproducible, and rank 0 of an N-rank job draws the same
numbers as a one-process run from the same seed (same initial weights).
"""
import random

import mxnet as mx
import numpy as np

from mxplugin import basics
from mxplugin.functions import broadcast_object


def rank_seed(base, rank):
    """A 32-bit seed for `rank`, mixed from `base` so that nearby bases and
    ranks give unrelated streams."""
    return int(np.random.SeedSequence([int(base), int(rank)]).generate_state(1)[0])


def seed_this_rank(name):
    """Seeds NumPy's, Python's and MXNet's generators for this rank (Note
    [Per-rank sampling seeds]); returns the seed."""
    base = int(np.random.randint(0, 2 ** 31 - 1))
    if basics.size() > 1:
        base = broadcast_object(base if basics.rank() == 0 else None, root_rank=0, name=name)
    seed = rank_seed(base, basics.rank())
    np.random.seed(seed)
    random.seed(seed)
    mx.random.seed(seed)
    return seed
