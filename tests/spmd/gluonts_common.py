"""Shared set-up of the GluonTS SPMD scripts: small artificial data, small
estimators, and what the checks compare (parameters, forecast accuracy)."""
import hashlib

import mxnet as mx
import numpy as np
from gluonts.dataset.artificial import ComplexSeasonalTimeSeries
from gluonts.env import env
from gluonts.evaluation import Evaluator, make_evaluation_predictions
from gluonts.mx import DeepAREstimator, SimpleFeedForwardEstimator
from gluonts.mx.trainer.callback import Callback

import mxplugin as hvd

PREDICTION_LENGTH = 24
env._push(use_tqdm=False)  # bars of several processes interleave into noise


def dataset(num_series=20):
    """Hourly series with daily seasonality, the same on every rank (the
    generator seeds itself)."""
    return ComplexSeasonalTimeSeries(num_series=num_series, prediction_length=PREDICTION_LENGTH, freq_str="H",
                                     length_low=200, length_high=300, percentage_unique_timestamps=0)


def estimator(kind, trainer, batch_size, **options):
    if kind == "deepar":
        settings = dict(num_cells=20, num_layers=1, context_length=48)
        settings.update(options)
        return DeepAREstimator(freq="H", prediction_length=PREDICTION_LENGTH, trainer=trainer,
                               batch_size=batch_size, **settings)
    settings = dict(num_hidden_dimensions=[40], context_length=48)
    settings.update(options)
    return SimpleFeedForwardEstimator(prediction_length=PREDICTION_LENGTH, trainer=trainer, batch_size=batch_size,
                                      **settings)


def parameter_arrays(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def parameter_digest(net):
    """A hash of every parameter's bytes: equal digests, equal parameters."""
    h = hashlib.sha256()
    for a in parameter_arrays(net):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def accuracy(predictor, test_data, seed=100):
    """MASE and mean weighted quantile loss of `predictor` on the held-out
    last window of every series, with fixed sampling."""
    np.random.seed(seed)
    mx.random.seed(seed)
    forecasts, series = make_evaluation_predictions(test_data, predictor, num_samples=100)
    metrics, _ = Evaluator(num_workers=0)(series, forecasts, num_series=len(test_data))
    return {"MASE": metrics["MASE"], "mean_wQuantileLoss": metrics["mean_wQuantileLoss"]}


class FixedStart(Callback):
    """Sets every parameter, once initialised, to values fixed by its
    position: runs that draw different initial weights start alike."""

    @staticmethod
    def initial(i, shape):
        """Parameter i's starting value."""
        return np.random.RandomState(i).normal(0.0, 0.1, shape)

    def on_network_initializing_end(self, training_network):
        for i, p in enumerate(training_network.collect_params().values()):
            p.set_data(mx.nd.array(self.initial(i, p.shape), dtype=p.dtype))


def same_on_every_rank(value, what):
    """Asserts that every rank has `value` (compared exactly)."""
    everyone = hvd.allgather_object(value, name="same." + what)
    assert all(v == everyone[0] for v in everyone), f"{what} differs across ranks: {everyone}"
    return everyone[0]
