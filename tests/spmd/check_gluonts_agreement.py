"""mxplugin.gluonts.Trainer: N ranks agree with one process, and with each other.

1. Combined batch: with the same windows (a fixed list of K batches of B
   rows, rank r taking rows [r*B/N, (r+1)*B/N) of each), N ranks end with
   the parameters and epoch loss of GluonTS's own Trainer, one process on
   the whole batches, from the same initial weights; a batch with a NaN
   loss on one rank is skipped by all, as one process skips it. The windows have an
   observed past: GluonTS's MeanScaler gives a window with nothing observed
   the batch's mean scale, which couples the rows of a batch (as BatchNorm
   would), so such a row's loss depends on which batch it is in.
2. Validation split: every rank reports the validation loss that one
   process computes over all validation batches with the same network.
3. LearningRateReduction (driven by the averaged loss) and early stopping:
   every rank sees the same learning rates and stops at the same epoch.
4. A stop asked by one rank's callback (a batch hook on one rank, an epoch
   hook on another) stops every rank at the same batch or epoch; the job
   ends rather than hangs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import finish, say, start  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from gluonts.mx import Trainer as GluonTSTrainer  # noqa: E402
from gluonts.mx.trainer.callback import Callback, TrainingHistory  # noqa: E402
from gluonts.mx.trainer.learning_rate_scheduler import LearningRateReduction  # noqa: E402
from gluonts.transform import ExpectedNumInstanceSampler  # noqa: E402

import mxplugin.gluonts  # noqa: E402
from gluonts_common import (PREDICTION_LENGTH, FixedStart, dataset, estimator, parameter_arrays,  # noqa: E402
                            parameter_digest, same_on_every_rank)

rank, size = start()
data = dataset()


def fixed_batches(est, count):
    """`count` global batches drawn once from a fixed seed: the same list on
    every rank."""
    np.random.seed(0)
    loader = est.create_training_data_loader(est.create_transformation().apply(data.train))
    return [batch for _, batch in zip(range(count), loader)]


def rows_of(batch, part, parts):
    rows = next(iter(batch.values())).shape[0] // parts
    return {k: v[part * rows:(part + 1) * rows] for k, v in batch.items()}


def assert_same_adam_update(actual, expected, initial, learning_rate, what):
    """`actual` ended where `expected` did, to what Adam's arithmetic
    guarantees on any x86-64 CPU (Note [Adam's rounding]).

    Note [Adam's rounding]: Adam moves each element by about
    learning_rate * m / sqrt(v) per step, at most about learning_rate
    whatever the gradient's size. A last-bit difference in a gradient (the
    2-rank sum and the 1-process batch add in a different order, and
    oneDNN's kernels differ between CPUs) is divided by sqrt(v); on an
    element whose gradients are all near zero it becomes a visible part of
    a step (seen: 1.8e-5 of a 1e-2 step on 1 element of 46,080, 2.5 % of
    its value). So each element may differ by a small part of one step
    (1/50 of learning_rate), while the parameter's whole update, its
    distance from the start, must agree to 1e-3 of its norm: a real
    disagreement (unaveraged gradients, wrong rows, a skipped or repeated
    batch) moves most elements by a good part of a step."""
    update, error = expected - initial, actual - expected
    worst = float(np.abs(error).max())
    assert worst <= learning_rate / 50, f"{what}: an element differs by {worst:.3g}, over 1/50 of a step ({learning_rate})"
    relative = float(np.linalg.norm(error) / max(np.linalg.norm(update), 1e-30))
    assert relative <= 1e-3, f"{what}: the update differs by {relative:.3g} of its norm ({np.linalg.norm(update):.3g})"
    return worst, relative


def check_combined_batch(kind):
    global_batch, steps = 8, 4
    options = {"train_sampler": ExpectedNumInstanceSampler(num_instances=1.0, min_past=48,
                                                            min_future=PREDICTION_LENGTH)}
    if kind == "deepar":
        options["dropout_rate"] = 0.0  # masks drawn per rank would differ from one process's
    est = estimator(kind, mxplugin.gluonts.Trainer(), global_batch, **options)
    batches = fixed_batches(est, steps)
    if kind == "sff":  # the last rank's rows of batch 1 give a NaN loss: one process skips the whole batch
        target = batches[1]["past_target"]
        target[global_batch - 1] = float("nan")
    settings = dict(epochs=2, num_batches_per_epoch=steps // 2, learning_rate=1e-2, clip_gradient=1.0,
                    weight_decay=1e-3, add_default_callbacks=False)
    reference = None
    if rank == 0:  # GluonTS itself, one process, whole batches
        history = TrainingHistory()
        net = est.create_training_network()
        net.initialize(ctx=mx.cpu(), init="xavier")
        GluonTSTrainer(callbacks=[FixedStart(), history], **settings)(net, iter(batches))
        reference = (parameter_arrays(net), history.loss_history)
    history = TrainingHistory()
    trainer = mxplugin.gluonts.Trainer(callbacks=[FixedStart(), history], **settings)
    net = est.create_training_network()
    net.initialize(ctx=mx.cpu(), init="xavier")
    trainer(net, iter([rows_of(b, rank, size) for b in batches]))  # one stream across epochs
    assert trainer.parameter_drift == 0.0, f"{kind}: ranks' parameters drifted by {trainer.parameter_drift}"
    same_on_every_rank(parameter_digest(net), kind + ".digest")
    same_on_every_rank(history.loss_history, kind + ".losses")
    if rank == 0:
        expected, expected_losses = reference
        errors = [assert_same_adam_update(a, b, FixedStart.initial(i, b.shape), settings["learning_rate"],
                                          f"{kind}: parameter {i} after {steps} steps on {size} ranks")
                  for i, (a, b) in enumerate(zip(parameter_arrays(net), expected))]
        say(f"COMBINED {kind} worst element {max(e[0] for e in errors):.3g}, "
            f"worst update norm {max(e[1] for e in errors):.3g}")
        np.testing.assert_allclose(history.loss_history, expected_losses, rtol=1e-5)
        say(f"COMBINED {kind} losses {history.loss_history} reference {expected_losses}")


def check_validation_split():
    history = TrainingHistory()
    est = estimator("sff", mxplugin.gluonts.Trainer(epochs=1, num_batches_per_epoch=3, learning_rate=1e-2,
                                                    callbacks=[history], add_default_callbacks=False), 4)
    transformation = est.create_transformation()
    train_loader = est.create_training_data_loader(transformation.apply(data.train))
    validation = est.create_validation_data_loader(transformation.apply(data.test))
    net = est.create_training_network()
    net.initialize(ctx=mx.cpu(), init="xavier")
    est.trainer(net, train_loader, validation)
    reported = same_on_every_rank(history.validation_loss_history, "validation")
    total = count = 0.0
    for batch in validation:  # one process, every batch
        loss = net(*batch.values())
        total += float(loss.sum().asscalar())
        count += loss.size
    np.testing.assert_allclose(reported, [total / count], rtol=1e-5)
    say(f"VALIDATION {reported} over {count:.0f} windows")


class Recorder(Callback):
    """What the hooks saw: learning rate per epoch, batches trained."""

    def __init__(self):
        self.rates, self.batches, self.epochs = [], 0, 0

    def on_train_batch_end(self, training_network):
        self.batches += 1
        return True

    def on_epoch_end(self, epoch_no, epoch_loss, training_network, trainer, best_epoch_info, ctx):
        self.rates.append(trainer.learning_rate)
        self.epochs += 1
        return True


def train_sff(callbacks, epochs, batches=3, **settings):
    trainer = mxplugin.gluonts.Trainer(epochs=epochs, num_batches_per_epoch=batches, callbacks=callbacks,
                                       **settings)
    est = estimator("sff", trainer, 8)
    return est.train(data.train)


def check_learning_rate_reduction():
    """objective 'max' on a falling loss: almost every epoch 'fails to
    improve', so the rate halves to min_lr and training stops, after a
    number of epochs that the averaged losses decide."""
    recorder, history = Recorder(), TrainingHistory()
    reduction = LearningRateReduction(objective="max", patience=1, base_lr=1e-2, decay_factor=0.5, min_lr=2.5e-3)
    train_sff([reduction, recorder, history], epochs=30, learning_rate=1e-2)
    rates = same_on_every_rank(recorder.rates, "rates")
    same_on_every_rank(history.loss_history, "reduction.losses")
    assert recorder.epochs < 30 and rates[-1] == 2.5e-3, f"no early stop: {rates}"
    say(f"REDUCTION stopped after {recorder.epochs} epochs, rates {rates}")


class StopOnOneRank(Callback):
    """Asks to stop on one rank only, after a given batch or epoch."""

    def __init__(self, who, after_batch=None, after_epoch=None):
        self.who, self.after_batch, self.after_epoch = who, after_batch, after_epoch
        self.batches = 0

    def on_train_batch_end(self, training_network):
        self.batches += 1
        return not (rank == self.who and self.batches == self.after_batch)

    def on_epoch_end(self, epoch_no, epoch_loss, training_network, trainer, best_epoch_info, ctx):
        return not (rank == self.who and epoch_no == self.after_epoch)


def check_one_rank_stops():
    recorder = Recorder()
    # an Initializer object (not a name) as init: compared across ranks by what it is
    train_sff([StopOnOneRank(size - 1, after_batch=5), recorder], epochs=4, init=mx.init.Xavier(magnitude=2.0))
    batches = same_on_every_rank(recorder.batches, "stop.batches")
    assert batches == 5, f"stopped after {batches} batches, not 5"
    recorder = Recorder()
    train_sff([StopOnOneRank(0, after_epoch=1), recorder], epochs=4)
    epochs = same_on_every_rank(recorder.epochs, "stop.epochs")
    assert epochs == 2, f"stopped after {epochs} epochs, not 2"
    say("STOPS agreed")


check_combined_batch("deepar")
check_combined_batch("sff")
check_validation_split()
check_learning_rate_reduction()
check_one_rank_stops()
finish()
