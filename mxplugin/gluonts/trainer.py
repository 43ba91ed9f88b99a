"""mxplugin.gluonts.Trainer: gluonts.mx.Trainer on every rank of a job.

Note [What a GluonTS job shares]: the estimator calls `trainer(net,
train_iter, validation_iter)` on every rank, each with its own copy of the
data. This class keeps GluonTS's training loop (the callbacks' hooks in the
same order with the same arguments, Adam with the trainer's learning rate,
clip_gradient and weight_decay, hybridization with static memory (and
whole passes as one engine segment: Note [Bulked segments]), one
checkpoint per epoch in a temporary directory for ModelAveraging) and
changes what must be shared:
  - settings: epochs, batches per epoch, optimizer settings, callbacks and
    the network's parameters are compared across ranks once, before any
    training, and a difference raises MismatchError on every rank;
  - data: each rank draws its own windows (Note [Per-rank sampling seeds]);
  - parameters: rank 0's after the first forward pass, then gradients summed
    by DistributedTrainer and divided by the combined batch size, so N ranks
    take the step one process would take on the N batches together;
  - decisions: losses are summed over ranks before a callback sees them
    (Note [Training rounds]), and every "continue?" the callbacks answer is
    joined over ranks, so LearningRateReduction, early stopping and
    ModelAveraging decide alike everywhere;
  - the result: after on_train_end every rank takes rank 0's parameters
    (they should already be equal; `parameter_drift` says by how much they
    were not), so every rank's predictor is the same.
Each rank writes its per-epoch checkpoints to its own temporary directory:
ModelAveraging reads them back on the same host, and hosts share no disk.

A Ctrl-C is not turned into GluonTS's "graceful shutdown" (which trains on
with what it has): it would need every rank to stop at the same batch, and
mxplugin ends an interrupted job on every rank instead.
"""
import itertools
import logging
import os
import tempfile
import warnings
from typing import List, Optional, Union

import mxnet as mx
from gluonts.core.component import validated
from gluonts.mx.context import num_gpus
from gluonts.mx.trainer import Trainer as GluonTSTrainer
from gluonts.mx.trainer.callback import Callback
from gluonts.mx.trainer.model_averaging import save_epoch_info
from gluonts.mx.util import HybridContext

from mxplugin import basics
from mxplugin.errors import ArgumentError
from mxplugin.gluonts.agreement import check_same_everywhere, everyone_agrees, make_parameters_identical
from mxplugin.gluonts.epochs import EpochRunner
from mxplugin.gluonts.seeding import seed_this_rank
from mxplugin.training.trainer import DistributedTrainer

logger = logging.getLogger("gluonts").getChild("trainer")
_call_ids = itertools.count()

# Note [Bulked segments]: MXNet runs a hybridized network's operators as
# engine ops in segments of at most MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD
# (BWD) nodes, 15 by default. A GluonTS network is hundreds of small
# operators (an unrolled RNN), so each segment's engine round trip (a
# worker wake-up, dependency bookkeeping) is a large share of its cost;
# with ranks sharing a host's cores those wake-ups also interleave with
# the other ranks' threads. Whole passes as one segment: DeepAR at 2 ranks
# x batch 32 ran 4-6 % faster in interleaved runs (bench/gluonts_deepar.py).
# What it gives up, gradients becoming ready one segment at a time, buys
# nothing here: the gradients of these small networks are reduced after
# the backward pass in one call. A user's own setting of either variable
# is kept.
BULK_SEGMENT_NODES = 1000
_BULK_SETTINGS = {"forward_bulk_size": "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD",
                  "backward_bulk_size": "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD"}


def draw_ahead():
    """Whether to draw each batch ahead (Note [Drawing ahead] in epochs.py):
    MXPLUGIN_GLUONTS_DRAW_AHEAD=1 or 0 if set, else where this rank has a
    core beyond one for itself (the cores this process may run on against
    the ranks on its host)."""
    setting = os.environ.get("MXPLUGIN_GLUONTS_DRAW_AHEAD", "")
    if setting not in ("", "0", "1"):
        raise ArgumentError(f"MXPLUGIN_GLUONTS_DRAW_AHEAD must be 0 or 1, not {setting!r}")
    if setting:
        return setting == "1"
    return len(os.sched_getaffinity(0)) >= 2 * basics.local_size()


def bulk_flags():
    """hybridize() flags for Note [Bulked segments]: a segment size for each
    pass whose environment variable the user has not set."""
    return {flag: BULK_SEGMENT_NODES for flag, var in _BULK_SETTINGS.items() if var not in os.environ}


def rank_context():
    """This rank's device: its local GPU when MXNet sees GPUs (ranks on a
    host take one each), else the CPU."""
    gpus = num_gpus()
    if not gpus:
        return mx.cpu()
    if not basics.is_initialized():
        basics.init()
    return mx.gpu(basics.local_rank() % gpus)


class Trainer(GluonTSTrainer):
    """gluonts.mx.Trainer for ``mxplugin-run -np N python train.py``: the
    same arguments, passed to any gluonts.mx estimator. ``batch_size`` (the
    estimator's) is per rank: a step averages the gradients of N batches.
    ``learning_rate`` applies to that average. ``num_batches_per_epoch``
    counts steps, so an epoch sees N times the windows of one process.

    GluonTS: ``gluonts.mx.Trainer``, same arguments and defaults, and its
    training loop on every rank (the callbacks' hooks, Adam, hybridization,
    ModelAveraging's per-epoch checkpoints). What differs: the settings and
    the networks are compared across ranks before training; each rank draws
    windows of its own (its random generators seeded from one draw of rank
    0's and its rank); rank 0's initial parameters go to every rank; the
    callbacks see losses over all ranks, and a stop that one rank's callback
    asks for stops every rank at the same batch; after training every rank
    takes rank 0's parameters, so every rank's predictor is the same. A
    Ctrl-C ends the job on every rank rather than GluonTS's graceful stop.
    No Horovod equivalent.

    Parameters
    ----------
    ctx : mxnet.Context, optional
        The device to train on; by default this rank's GPU (its local rank,
        modulo the GPUs MXNet sees) or the CPU. On a host with GPUs the
        default starts mxplugin (``init()``) to learn the local rank.
    epochs : int, default 100
        Epochs to train, the same on every rank.
    num_batches_per_epoch : int, default 50
        Steps per epoch, each with one batch on every rank. An epoch also
        ends, on every rank, when some rank's batches run out.
    learning_rate : float, default 1e-3
        Adam's learning rate, for the gradient averaged over the ranks'
        combined batch (and the base of the default LearningRateReduction).
    clip_gradient : float, default 10.0
        Adam's ``clip_gradient``: the averaged gradient is clipped element by
        element to ``[-clip_gradient, clip_gradient]``.
    weight_decay : float, default 1e-8
        Adam's weight decay (L2 penalty) coefficient.
    init : str or mxnet.initializer.Initializer, default "xavier"
        The initializer the estimator gives the network's parameters; rank
        0's initial values then go to every rank, at the first forward pass.
    hybridize : bool, default True
        Hybridizes the network for training (static memory and shapes, each
        pass one engine segment unless ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD``
        or ``..._BWD`` is set).
    callbacks : list of gluonts.mx.trainer.callback.Callback, optional
        GluonTS's callbacks, run on every rank. Their hooks get the losses
        over all ranks, and each "go on?" they answer is joined over the
        ranks: one rank's "stop" stops every rank. Every rank passes the same
        kinds, in the same order.
    add_default_callbacks : bool, default True
        As in GluonTS: adds ``ModelAveraging`` (of the best epoch) and
        ``LearningRateReduction`` (from ``learning_rate``, patience 10)
        unless ``callbacks`` has one of that kind.

    Attributes
    ----------
    parameter_drift : float or None
        Set by each training: the largest difference any rank's parameters
        had from rank 0's at the end of it (0.0: none, as it should be; a
        RuntimeWarning says when not). None before training.

    Raises
    ------
    AssertionError
        GluonTS's checks of the values (``epochs`` negative, a learning rate
        that is not positive, ...).
    ValueError
        An argument of the wrong type (GluonTS's validation).
    MismatchError
        When the estimator trains, on every rank and before any step, if the
        ranks' settings, callbacks or networks differ.
    mxplugin.errors.ArgumentError
        When training starts, if ``MXPLUGIN_GLUONTS_DRAW_AHEAD`` is set to
        other than 0 or 1.
    gluonts.exceptions.GluonTSDataError
        On every rank, when some rank could build no training batch (an
        empty dataset, or series too short).

    Examples
    --------
    >>> import numpy as np
    >>> import mxplugin as hvd
    >>> import mxplugin.gluonts
    >>> from gluonts.dataset.common import ListDataset
    >>> from gluonts.mx import SimpleFeedForwardEstimator
    >>> hvd.init()
    >>> data = ListDataset([{"start": "2024-01-01", "target": np.sin(np.arange(60) / 4.0)}], freq="H")
    >>> trainer = mxplugin.gluonts.Trainer(epochs=1, num_batches_per_epoch=2)
    >>> estimator = SimpleFeedForwardEstimator(prediction_length=4, context_length=8, num_hidden_dimensions=[8],
    ...                                        batch_size=4, trainer=trainer)  # batch_size: each rank's
    >>> predictor = estimator.train(data)  # on every rank, the same predictor
    >>> trainer.parameter_drift
    0.0
    >>> next(iter(predictor.predict(data))).mean.shape
    (4,)
    """

    @validated()
    def __init__(
        self,
        ctx: Optional[mx.Context] = None,
        epochs: int = 100,
        num_batches_per_epoch: int = 50,
        learning_rate: float = 1e-3,
        clip_gradient: float = 10.0,
        weight_decay: float = 1e-8,
        init: Union[str, mx.initializer.Initializer] = "xavier",
        hybridize: bool = True,
        callbacks: Optional[List[Callback]] = None,
        add_default_callbacks: bool = True,
    ) -> None:
        super().__init__(ctx=ctx if ctx is not None else rank_context(), epochs=epochs,
                         num_batches_per_epoch=num_batches_per_epoch, learning_rate=learning_rate,
                         clip_gradient=clip_gradient, weight_decay=weight_decay, init=init, hybridize=hybridize,
                         callbacks=callbacks, add_default_callbacks=add_default_callbacks)
        self.parameter_drift = None  # set by each call: see make_parameters_identical

    def _settings(self, net, validation_iter):
        """What every rank must have alike (Note [What a GluonTS job shares])."""
        return {"epochs": self.epochs, "num_batches_per_epoch": self.num_batches_per_epoch,
                "learning_rate": self.learning_rate, "clip_gradient": self.clip_gradient,
                "weight_decay": self.weight_decay, "hybridize": self.hybridize,
                # an Initializer's repr holds its address: its dumps() says what it is
                "init": self.init if isinstance(self.init, str) else self.init.dumps(),
                "callbacks": [type(c).__name__ for c in self.callbacks.callbacks],
                "network": type(net).__name__, "validation data": validation_iter is not None,
                "halted before training": self.halt}

    def __call__(self, net, train_iter, validation_iter=None):
        if not basics.is_initialized():
            basics.init()
        name = f"gluonts{next(_call_ids)}."
        if basics.size() > 1:
            check_same_everywhere("mxplugin.gluonts.Trainer", self._settings(net, validation_iter),
                                  name + "settings")
        seed_this_rank(name + "seed")
        logger.info("Start model training on %d rank(s)", basics.size())
        with tempfile.TemporaryDirectory(prefix="mxplugin-gluonts-") as scratch, \
                HybridContext(net=net, hybridize=self.hybridize, static_alloc=True, static_shape=True, **bulk_flags()):
            optimizer = mx.optimizer.Adam(learning_rate=self.learning_rate, wd=self.weight_decay,
                                          clip_gradient=self.clip_gradient)
            trainer = DistributedTrainer(net.collect_params(), optimizer, prefix=name + "grads.")
            runner = EpochRunner(net, trainer, self.callbacks, name, self.epochs, draw_ahead=draw_ahead())
            self._run_epochs(net, trainer, runner, train_iter, validation_iter, scratch, name)
            self.callbacks.on_train_end(training_network=net, temporary_dir=scratch, ctx=self.ctx)
        self.parameter_drift = make_parameters_identical(net.collect_params(), name + "final")
        if self.parameter_drift:
            warnings.warn(f"mxplugin.gluonts.Trainer: the ranks' parameters differed by up to "
                          f"{self.parameter_drift:g} at the end of training; every rank now has rank 0's",
                          RuntimeWarning, stacklevel=2)
        logger.info("End model training")

    def _run_epochs(self, net, trainer, runner, train_iter, validation_iter, scratch, name):
        """GluonTS's epoch loop, each continue-or-stop joined over ranks."""
        best = {"params_path": os.path.join(scratch, "state-init.params"), "epoch_no": -1, "score": float("inf")}
        self.callbacks.on_train_start(max_epochs=self.epochs)
        for epoch_no in range(self.epochs):
            if self.halt:
                logger.info("Epoch[%d] Interrupting training", epoch_no)
                break
            if basics.rank() == 0:
                logger.info("Epoch[%d] Learning rate is %s", epoch_no, trainer.learning_rate)
            hooks = {"epoch_no": epoch_no, "training_network": net, "trainer": trainer}
            train = runner.train(epoch_no, iter(train_iter), self.num_batches_per_epoch)
            self.halt = self.halt or train.stop
            go_on = self.callbacks.on_train_epoch_end(epoch_loss=train.loss, **hooks)
            # joined before the next hook, which GluonTS skips after a "stop":
            # every rank's callbacks then see the same sequence of hooks
            go_on = everyone_agrees(go_on, name + "agree.train")
            score = train.loss
            if validation_iter is not None:
                validation = runner.validate(epoch_no, validation_iter, self.halt)
                self.halt = self.halt or validation.stop
                go_on = go_on and self.callbacks.on_validation_epoch_end(epoch_loss=validation.loss, **hooks)
                go_on = everyone_agrees(go_on, name + "agree.validation")
                score = validation.loss
            base = os.path.join(scratch, f"state-epoch{epoch_no:04d}")
            info = {"params_path": f"{base}-0000.params", "epoch_no": epoch_no, "score": score}
            net.save_parameters(info["params_path"])
            save_epoch_info(base, info)
            if score < best["score"]:
                best = dict(info)
            go_on = go_on and self.callbacks.on_epoch_end(epoch_loss=score, best_epoch_info=best, ctx=self.ctx,
                                                          **hooks)
            if not everyone_agrees(go_on, name + "agree.epoch"):
                logger.info("Stopping training")
                break
