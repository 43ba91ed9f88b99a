"""GluonTS estimators trained by mxplugin.gluonts.Trainer on this job's ranks.

Arguments: the models (deepar,sff) and a directory for the predictors.
Each model trains at the same global batch whatever the number of ranks,
with GluonTS's default callbacks. Every rank checks: the same parameters
(bit for bit) and loss history as every other rank, no drift corrected at
the end, the averaged loss falling, and the predictor written once by
serialize() reading back the same on every rank. Rank 0 prints the forecast
accuracy on the held-out window ("METRICS <json>"), which the test compares
across numbers of ranks.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import finish, say, start  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from gluonts.model.predictor import Predictor  # noqa: E402
from gluonts.mx.trainer.callback import TrainingHistory  # noqa: E402

import mxplugin.gluonts  # noqa: E402
from gluonts_common import accuracy, dataset, estimator, parameter_digest, same_on_every_rank  # noqa: E402

# Settings whose accuracy varies little with the seed (about 5% in
# mean_wQuantileLoss), so that 1, 2 and 3 ranks can be held to 10%.
MODELS = {
    "deepar": dict(global_batch=32, epochs=8, num_batches_per_epoch=16),
    "sff": dict(global_batch=24, epochs=20, num_batches_per_epoch=20),
}

rank, size = start()
models, out_dir = sys.argv[1].split(","), sys.argv[2]
data = dataset()
report = {}
for kind in models:
    settings = MODELS[kind]
    assert settings["global_batch"] % size == 0, f"{kind}: global batch {settings['global_batch']} on {size} ranks"
    np.random.seed(0)
    mx.random.seed(0)
    history = TrainingHistory()
    trainer = mxplugin.gluonts.Trainer(epochs=settings["epochs"], num_batches_per_epoch=settings["num_batches_per_epoch"],
                                       learning_rate=1e-2, callbacks=[history])
    predictor = estimator(kind, trainer, settings["global_batch"] // size).train(data.train)
    assert trainer.parameter_drift == 0.0, f"{kind}: the ranks' parameters drifted by {trainer.parameter_drift}"
    digest = same_on_every_rank(parameter_digest(predictor.prediction_net), kind + ".digest")
    losses = same_on_every_rank(history.loss_history, kind + ".losses")
    assert losses[-1] < losses[0], f"{kind}: the averaged loss did not fall: {losses}"
    path = os.path.join(out_dir, kind)
    mxplugin.gluonts.serialize(predictor, path)
    assert parameter_digest(Predictor.deserialize(Path(path)).prediction_net) == digest, f"{kind}: read back"
    if rank == 0:
        report[kind] = dict(accuracy(predictor, data.test), losses=losses)
if rank == 0:
    say("METRICS " + json.dumps(report))
finish()
