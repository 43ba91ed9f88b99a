"""Trains GluonTS's DeepAR on artificial hourly series on every rank of a job
with mxplugin.gluonts.Trainer, evaluates the forecasts of the last day and
writes the predictor once (rank 0).

    pip install -e '.[gluonts]'
    mxplugin-run -np 2 python examples/gluonts_deepar.py --out /tmp/deepar

--batch-size is the global batch: each rank draws batch-size / N windows of
its own per step, and a step averages the N ranks' gradients, so the model
sees what one process with the whole batch would see (docs/guides/gluonts.md).
"""
import argparse
import logging

import mxnet as mx
import numpy as np

import mxplugin as hvd
import mxplugin.gluonts  # before GluonTS's own modules: it imports GluonTS without its JSON notice

from gluonts.dataset.artificial import ComplexSeasonalTimeSeries
from gluonts.evaluation import Evaluator, make_evaluation_predictions
from gluonts.mx import DeepAREstimator


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--series", type=int, default=100, help="artificial series (default 100)")
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--batches-per-epoch", type=int, default=50, help="steps per epoch (default 50)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split across ranks (default 64)")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate (default 1e-3)")
    p.add_argument("--seed", type=int, default=42, help="seed; each rank derives its own from it (default 42)")
    p.add_argument("--out", help="directory to write the trained predictor to (rank 0 writes it)")
    p.add_argument("--max-wql", type=float, default=None,
                   help="exit with status 1 if the mean weighted quantile loss is above this")
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING, format="%(message)s")
    if args.batch_size % size:
        raise SystemExit(f"--batch-size {args.batch_size} does not split into {size} ranks")
    np.random.seed(args.seed)  # the same on every rank: the Trainer derives each rank's own
    mx.random.seed(args.seed)
    data = ComplexSeasonalTimeSeries(num_series=args.series, prediction_length=24, freq_str="H",
                                     length_low=300, length_high=500, percentage_unique_timestamps=0)
    trainer = mxplugin.gluonts.Trainer(epochs=args.epochs, num_batches_per_epoch=args.batches_per_epoch,
                                       learning_rate=args.lr)
    estimator = DeepAREstimator(freq="H", prediction_length=24, trainer=trainer,
                                batch_size=args.batch_size // size)
    predictor = estimator.train(data.train)

    # Every rank holds the same predictor; each evaluates, rank 0 reports.
    np.random.seed(args.seed)
    mx.random.seed(args.seed)
    forecasts, series = make_evaluation_predictions(data.test, predictor, num_samples=100)
    metrics, _ = Evaluator(num_workers=0)(series, forecasts, num_series=len(data.test))
    if rank == 0:
        logging.info("%d rank(s): MASE %.3f, mean weighted quantile loss %.4f", size, metrics["MASE"],
                     metrics["mean_wQuantileLoss"])
    if args.out:
        mxplugin.gluonts.serialize(predictor, args.out)
        if rank == 0:
            logging.info("predictor written to %s", args.out)
    if args.max_wql is not None and metrics["mean_wQuantileLoss"] > args.max_wql:
        raise SystemExit(f"mean weighted quantile loss {metrics['mean_wQuantileLoss']:.4f} > {args.max_wql}")


if __name__ == "__main__":
    main()
