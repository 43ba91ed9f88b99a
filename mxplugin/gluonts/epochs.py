"""One training or validation epoch of a GluonTS network on every rank.

Note [Training rounds]: every training batch is one round. Its forward and
backward passes run, then two reductions start together: the gradients
(DistributedTrainer.allreduce_grads) and a small vector of counters
(RankTotals, a fixed name and shape). Reading the counters is the round's
one wait; the update follows only if they allow it. They carry what the
ranks must decide together:
  - present: ranks that drew a batch. An epoch ends for all when one rank's
    batches end (GluonTS's training loaders never end; a finite one on some
    ranks must not leave the others waiting in a reduction). A rank without
    a batch still takes part in the gradient reduction, whose sums are then
    not used.
  - skipped: ranks whose loss is not finite. One process on the combined
    batch would see a non-finite loss and skip the batch, so no rank
    updates: the summed gradients are dropped and the loss not counted.
  - loss_sum, loss_count: the batch's loss summed and counted over ranks, so
    the progress bar and the epoch loss the callbacks see are what one
    process on the combined batch would report (mx.metric.Loss's mean).
  - rows: the combined batch size. update() gets rows / size, so that the
    gradients summed over ranks are divided by the combined batch size even
    when ranks' batches differ in size.
  - stop: ranks whose on_train_batch_end asked to stop after the previous
    round. Callbacks such as TrainingTimeLimit decide by each rank's clock;
    the vote arrives one round late (that round's batch is computed but not
    used, as GluonTS would not have drawn it), and all ranks stop at the
    same batch. After the last batch one more round, with no batch and no
    gradients, collects the last votes.
Starting both reductions before waiting for either leaves one wait per batch
(a rank's forward pass no longer waits for the others before its backward
pass) and lets the core negotiate both in one cycle.

Note [Drawing ahead]: where a rank has a core to spare (draw_ahead), the
next batch is drawn before the round's wait, so GluonTS's data pipeline
(Python, on this thread) runs while MXNet's worker computes this batch's
passes: one process of DeepAR then uses 1.5 cores. Where the host's ranks
already have a core each or less, the two would only take turns on one
core, and contend for its cache: DeepAR at 2 ranks on 2 cores ran 7-10 %
slower drawing ahead, so there the batch is drawn after the wait. A round
that ends the epoch drops a batch drawn ahead, which nothing had used.

Validation needs no rounds (no step): each rank takes every size-th batch
and the totals are summed once at the end.
"""
import itertools
import logging

import mxnet as mx
import numpy as np
from gluonts.exceptions import GluonTSDataError
from gluonts.gluonts_tqdm import tqdm

from mxplugin import basics
from mxplugin.functions import RankTotals
from mxplugin.gluonts.agreement import broadcast_parameters, check_parameters_agree

logger = logging.getLogger("gluonts").getChild("trainer")

ROUND_FIELDS = ("present", "skipped", "loss_sum", "loss_count", "rows", "stop")


class EpochResult:
    """An epoch's loss over all ranks (nan when no batch counted) and
    whether some rank's callbacks asked training to stop."""

    def __init__(self, loss, stop):
        self.loss = loss
        self.stop = stop


def _loss_of(output):
    # a network with several outputs returns the loss first (a list when
    # hybridized, a tuple otherwise)
    return output[0] if isinstance(output, (list, tuple)) else output


def _mean(total, count):
    return total / count if count else float("nan")


def _draw(batches, round_no, num_batches):
    """The batch of round `round_no`: None from round num_batches on (the
    closing round), or where this rank's batches have ended."""
    return next(batches, None) if round_no < num_batches else None


def _counter_vector(**values):
    """ROUND_FIELDS in order as one float64 NDArray on the host; each value a
    number or a 1-element float64 NDArray (0 when not given). On the host
    whatever device the loss is on: a rank without a batch makes its vector
    there too, and every rank's must be alike for one collective."""
    # Numbers become arrays through an engine op (nd.full), not nd.array:
    # nd.array copies in from Python, which first waits for every op queued
    # on the engine's worker (the batch's forward pass) to finish.
    parts = [v.as_in_context(mx.cpu()) if isinstance(v, mx.nd.NDArray) else mx.nd.full((1,), v, dtype="float64")
             for v in (values.get(f, 0.0) for f in ROUND_FIELDS)]
    return mx.nd.concat(*parts, dim=0)


class EpochRunner:
    """Runs the epochs of one Trainer call: the network, the
    DistributedTrainer, the callbacks, collective names under `name`, and
    whether to draw each batch ahead (Note [Drawing ahead])."""

    def __init__(self, net, trainer, callbacks, name, epochs, draw_ahead):
        self.net = net
        self.draw_ahead = draw_ahead  # Note [Drawing ahead]
        self.trainer = trainer
        self.callbacks = callbacks
        self.name = name
        self.epochs = epochs
        self.initialised = False
        self.rounds = RankTotals(name + "round", ROUND_FIELDS)
        self.validation_totals = RankTotals(name + "validation", ROUND_FIELDS)

    # -- training ---------------------------------------------------------------
    def train(self, epoch_no, batches, num_batches):
        """One training epoch (Note [Training rounds])."""
        if self.initialised:
            self.callbacks.on_train_epoch_start(training_network=self.net)
        size = basics.size()
        bar = self._progress(num_batches)
        loss_sum = loss_count = 0.0
        stop_vote = False
        batch = _draw(batches, 0, num_batches)
        for round_no in itertools.count():
            if not self.initialised:
                self._initialise(batch)
            loss, counters = self._forward(batch, mx.autograd.train_mode, stop_vote)
            if loss is not None:
                loss.backward()
            pending = self.rounds.start(counters)
            if round_no < num_batches:  # the same on every rank: the closing round has no gradients
                self.trainer.allreduce_grads()
            upcoming = _draw(batches, round_no + 1, num_batches) if self.draw_ahead else None
            totals = self.rounds.read(pending)
            if totals["stop"]:
                return self._finish(bar, epoch_no, loss_sum, loss_count, stop=True)
            if totals["present"] < size:
                if round_no == 0:
                    self._no_data("training", totals["present"])
                break
            if totals["skipped"]:
                if basics.rank() == 0:
                    logger.warning("Batch [%d] of Epoch[%d] gave NaN loss on %d rank(s) and it will be ignored",
                                   round_no + 1, epoch_no, int(totals["skipped"]))
                stop_vote = False
            else:
                self.trainer.update(totals["rows"] / size)
                stop_vote = not self.callbacks.on_train_batch_end(training_network=self.net)
                loss_sum += totals["loss_sum"]
                loss_count += totals["loss_count"]
            self._show(bar, epoch_no, "avg_epoch_loss", _mean(loss_sum, loss_count))
            batch = upcoming if self.draw_ahead else _draw(batches, round_no + 1, num_batches)
        return self._finish(bar, epoch_no, loss_sum, loss_count, stop=False)

    def _initialise(self, batch):
        """The first forward pass initialises the deferred parameters; then
        rank 0's values (after on_network_initializing_end, which may load
        weights) are broadcast, so every rank starts from the same ones."""
        present = self.rounds.sum(present=batch is not None)["present"]
        if present < basics.size():
            self._no_data("training", present)
        self.net(*batch.values())
        self.callbacks.on_network_initializing_end(training_network=self.net)
        params = self.net.collect_params()
        if basics.size() > 1:
            check_parameters_agree(params, self.name + "layout")
            broadcast_parameters(params, self.name + "init")
        if basics.rank() == 0:
            count = sum(int(np.prod(p.shape)) for p in params.values())
            logger.info("Number of parameters in %s: %d", type(self.net).__name__, count)
        self.initialised = True
        self.callbacks.on_train_epoch_start(training_network=self.net)

    def _forward(self, batch, mode, stop_vote=False):
        """The loss of `batch` (recorded for backward) and this rank's
        counters for the round, which MXNet computes without this thread
        waiting for them."""
        if batch is None:
            return None, _counter_vector(stop=float(stop_vote))
        loss = self._loss(batch, mode)
        total = mx.nd.sum(loss).astype("float64").reshape((1,))
        finite = mx.nd.contrib.isfinite(total)
        return loss, _counter_vector(present=1.0, skipped=1.0 - finite,
                                     loss_sum=mx.nd.where(finite, total, mx.nd.zeros_like(total)),
                                     loss_count=finite * float(loss.size), rows=float(loss.shape[0]),
                                     stop=float(stop_vote))

    def _loss(self, batch, mode):
        with mx.autograd.record():
            with mode():
                return _loss_of(self.net(*batch.values()))

    # -- validation -------------------------------------------------------------
    def validate(self, epoch_no, batches, halted):
        """The validation loss over all ranks: rank r evaluates batches r,
        r + size, ...; a halted training reports nan, as GluonTS does."""
        self.callbacks.on_validation_epoch_start(training_network=self.net)
        if halted:
            return EpochResult(float("nan"), stop=True)
        local = {"present": 0, "loss_sum": 0.0, "loss_count": 0, "stop": 0}
        bar = self._progress(None)
        for batch in itertools.islice(batches, basics.rank(), None, basics.size()):
            local["present"] += 1
            loss = self._loss(batch, mx.autograd.predict_mode)
            total = float(mx.nd.sum(loss).asscalar())
            if not np.isfinite(total):
                logger.warning("A validation batch of Epoch[%d] gave NaN loss and it will be ignored", epoch_no)
                continue
            local["loss_sum"] += total
            local["loss_count"] += loss.size
            self._show(bar, epoch_no, "validation_avg_epoch_loss", _mean(local["loss_sum"], local["loss_count"]))
            if not self.callbacks.on_validation_batch_end(training_network=self.net):
                local["stop"] = 1
                break
        totals = self.validation_totals.sum(**local)
        if not totals["present"]:
            self._no_data("validation", 0)
        if bar is not None:
            bar.close()
        loss = _mean(totals["loss_sum"], totals["loss_count"])
        if basics.rank() == 0:
            logger.info("Epoch[%d] Evaluation metric 'validation_epoch_loss'=%f (over %d rank(s))", epoch_no, loss,
                        basics.size())
        return EpochResult(loss, stop=bool(totals["stop"]))

    # -- reporting --------------------------------------------------------------
    def _progress(self, total):
        """A progress bar on rank 0 only: one bar for the job, showing the
        loss over all ranks."""
        return tqdm(None, total=total) if basics.rank() == 0 else None

    def _show(self, bar, epoch_no, label, value):
        if bar is None:
            return
        bar.update(1)
        bar.set_postfix(ordered_dict={"epoch": f"{epoch_no + 1}/{self.epochs}", label: value}, refresh=False)

    def _finish(self, bar, epoch_no, loss_sum, loss_count, stop):
        if bar is not None:
            bar.close()
        loss = _mean(loss_sum, loss_count)
        if basics.rank() == 0 and not stop:
            logger.info("Epoch[%d] Evaluation metric 'epoch_loss'=%f (over %d rank(s))", epoch_no, loss, basics.size())
        return EpochResult(loss, stop=stop)

    @staticmethod
    def _no_data(kind, present):
        """GluonTS's error for an epoch without a batch, raised on every rank."""
        where = "" if not present else f" on {basics.size() - int(present)} of {basics.size()} ranks"
        raise GluonTSDataError(f"No {kind} data batch could be constructed{where}; this usually indicates that the "
                               f"{kind} dataset is empty, or consists of too short series. If using a random "
                               "data sampler, this might be caused by not taking enough samples.")
