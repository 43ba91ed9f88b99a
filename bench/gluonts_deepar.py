"""DeepAR training throughput: one process against mxplugin.gluonts on 2 ranks.

    python bench/gluonts_deepar.py all       # every setting, 3 rounds: ~10 minutes on 2 cores
    python bench/gluonts_deepar.py one --setting NAME --out FILE   # one run (what `all` starts)

GluonTS's default DeepAR (2 LSTM layers of 40 cells, dropout 0.1,
context = prediction length = 24, Adam at 1e-3) on 200 artificial hourly
series, global batch 64, the same number of steps in every setting:
  single_1thread   GluonTS's own Trainer, OMP_NUM_THREADS=1
  single_2threads  GluonTS's own Trainer, OMP_NUM_THREADS=2, 2 MXNet workers
  single_default   GluonTS's own Trainer, MXNet's default threads
  single_1thread_bulk  GluonTS's own Trainer, 1 thread, whole passes as one
                   engine segment (the MXNET_EXEC_BULK_EXEC_* variables at
                   1000), the setting our Trainer uses (Note [Bulked segments])
  mxplugin_1rank   mxplugin.gluonts.Trainer alone (its overhead), 1 thread
  mxplugin_2ranks  mxplugin.gluonts.Trainer, 2 ranks x 1 thread, batch 32 each
and one setting at the per-rank batch, which bounds what 2 ranks can reach:
  single_1thread_half  GluonTS's own Trainer, 1 thread, batch 32 (its
                   samples/s, twice, is 2 ranks with nothing lost to
                   communication, rounds or sharing the machine)
Each run is a fresh job. The settings run in ROUNDS interleaved rounds
(the order rotating), so that load from other work on the machine falls on
all of them alike.
Samples per second: the global batch times the batches of an epoch over the
epoch's time (on_train_epoch_start to on_train_epoch_end on rank 0); the
median over every epoch but each run's first. Time to a loss: from the start
of training to the end of the first epoch whose (averaged) loss is at or
below the target, the lowest loss that every run reaches; the median over
a setting's runs. Forecast accuracy on the held-out window is recorded too.
Cores: CPU time of rank 0's process (all its threads) over each epoch's
wall time, the median epoch: one process of GluonTS's Trainer uses one core,
ours overlaps data loading with compute. Ratios are against the best
GluonTS's Trainer setting (the issue's reference) and against our Trainer
alone on one process.
Results: bench/results/gluonts_deepar.json.
"""
import json
import os
import statistics
import time

from harness import REPO, RESULTS, arguments, interleave, write_result
from jobs import mpi_command, run, this_script
from machine import load_span

GLOBAL_BATCH = 64
EPOCHS = 5
BATCHES_PER_EPOCH = 40
SERIES = 200
ROUNDS = 3

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MXNET_CPU_WORKER_NTHREADS": "1"}
BULK = {"MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD": "1000", "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD": "1000"}
# name: (ranks, batch per rank, trainer, environment for each process; None = unset)
SETTINGS = {
    "single_1thread": (1, GLOBAL_BATCH, "gluonts", ONE_THREAD),
    "single_2threads": (1, GLOBAL_BATCH, "gluonts", {"OMP_NUM_THREADS": "2", "MXNET_CPU_WORKER_NTHREADS": "2"}),
    "single_default": (1, GLOBAL_BATCH, "gluonts", {"OMP_NUM_THREADS": None, "MXNET_CPU_WORKER_NTHREADS": None}),
    "single_1thread_bulk": (1, GLOBAL_BATCH, "gluonts", dict(ONE_THREAD, **BULK)),
    "mxplugin_1rank": (1, GLOBAL_BATCH, "mxplugin", ONE_THREAD),
    "mxplugin_2ranks": (2, GLOBAL_BATCH // 2, "mxplugin", ONE_THREAD),
    "single_1thread_half": (1, GLOBAL_BATCH // 2, "gluonts", ONE_THREAD),
}


def train_one(setting):
    """Trains in this process (one rank of the job); rank 0 returns the record."""
    import mxnet as mx
    import numpy as np
    from gluonts.dataset.artificial import ComplexSeasonalTimeSeries
    from gluonts.env import env
    from gluonts.evaluation import Evaluator, make_evaluation_predictions
    from gluonts.mx import DeepAREstimator
    from gluonts.mx import Trainer as GluonTSTrainer
    from gluonts.mx.trainer.callback import Callback

    ranks, batch, kind, _ = SETTINGS[setting]
    rank = 0
    if kind == "mxplugin":
        import mxplugin as hvd
        import mxplugin.gluonts

        hvd.init()
        rank = hvd.rank()
        assert hvd.size() == ranks, f"{setting} runs on {ranks} ranks, not {hvd.size()}"

    class EpochClock(Callback):
        def __init__(self):
            self.start, self.epoch_start, self.epochs = None, None, []

        def on_train_start(self, max_epochs):
            self.start = time.perf_counter()

        def on_train_epoch_start(self, training_network):
            self.epoch_start = time.perf_counter()
            self.epoch_cpu = time.process_time()

        def on_train_epoch_end(self, epoch_no, epoch_loss, training_network, trainer):
            now = time.perf_counter()
            # cores: CPU time of all this process's threads over the epoch's wall time
            self.epochs.append({"seconds": now - self.epoch_start, "since_start": now - self.start,
                                "loss": epoch_loss,
                                "cores": (time.process_time() - self.epoch_cpu) / (now - self.epoch_start)})
            return True

    env._push(use_tqdm=False)
    np.random.seed(0)
    mx.random.seed(0)
    data = ComplexSeasonalTimeSeries(num_series=SERIES, prediction_length=24, freq_str="H", length_low=300,
                                     length_high=600, percentage_unique_timestamps=0)
    clock = EpochClock()
    Trainer = mxplugin.gluonts.Trainer if kind == "mxplugin" else GluonTSTrainer
    trainer = Trainer(epochs=EPOCHS, num_batches_per_epoch=BATCHES_PER_EPOCH, learning_rate=1e-3, callbacks=[clock])
    estimator = DeepAREstimator(freq="H", prediction_length=24, trainer=trainer, batch_size=batch)
    predictor = estimator.train(data.train)
    if rank != 0:
        return None
    np.random.seed(1)
    mx.random.seed(1)
    forecasts, series = make_evaluation_predictions(data.test, predictor, num_samples=100)
    metrics, _ = Evaluator(num_workers=0)(series, forecasts, num_series=len(data.test))
    rates = [ranks * batch * BATCHES_PER_EPOCH / e["seconds"] for e in clock.epochs[1:]]
    cores = statistics.median(e["cores"] for e in clock.epochs[1:])
    return {"setting": setting, "ranks": ranks, "trainer": kind, "batch_per_rank": batch,
            "samples_per_s": rates, "median_samples_per_s": statistics.median(rates), "epochs": clock.epochs,
            "cores_rank0": cores,
            "MASE": metrics["MASE"], "mean_wQuantileLoss": metrics["mean_wQuantileLoss"]}


def launch(setting):
    """Runs one setting in fresh processes, with its threads; returns its record."""
    ranks, _, _, threads = SETTINGS[setting]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    for key, value in threads.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    out_file = os.path.join(RESULTS, f".gluonts_{setting}.json")
    cmd = mpi_command(ranks, this_script(__file__, "one", "--setting", setting, "--out", out_file))
    print("$", " ".join(f"{k}={v}" for k, v in threads.items() if v), " ".join(cmd), flush=True)
    started = time.perf_counter()
    with load_span() as load:  # other work on the machine, reported beside the numbers
        run(cmd, env=env, timeout=1800, what=setting)
    with open(out_file) as f:
        record = json.load(f)
    os.remove(out_file)
    record["process_wall_s"] = time.perf_counter() - started
    record["load_average_1min"] = load
    print(f"  {record['median_samples_per_s']:.0f} samples/s, wQL {record['mean_wQuantileLoss']:.4f}", flush=True)
    return record


def summarise(runs):
    """Per setting: median samples/s, time to the common loss and accuracy;
    ratios of 2 ranks to the best single-process setting, whichever trainer."""
    # losses and accuracy compare only runs at the global batch (the
    # per-rank-batch reference takes other steps)
    same_batch = [n for n in runs if runs[n][0]["ranks"] * runs[n][0]["batch_per_rank"] == GLOBAL_BATCH]
    target = max(min(e["loss"] for e in run["epochs"]) for n in same_batch for run in runs[n])
    settings = {}
    for name, rs in runs.items():
        rates = [x for run in rs for x in run["samples_per_s"]]
        times = [next(e["since_start"] for e in run["epochs"] if e["loss"] <= target) for run in rs] \
            if name in same_batch else None
        settings[name] = {"ranks": rs[0]["ranks"], "trainer": rs[0]["trainer"],
                          "batch_per_rank": rs[0]["batch_per_rank"],
                          "median_samples_per_s": statistics.median(rates),
                          "run_medians_samples_per_s": [run["median_samples_per_s"] for run in rs],
                          "median_time_to_target_s": statistics.median(times) if times else None,
                          "median_wQuantileLoss": statistics.median(run["mean_wQuantileLoss"] for run in rs),
                          "median_MASE": statistics.median(run["MASE"] for run in rs),
                          "median_cores_rank0": statistics.median(run["cores_rank0"] for run in rs),
                          "load_average_1min": [min(x for run in rs for x in run["load_average_1min"]),
                                                max(x for run in rs for x in run["load_average_1min"])]}
    # The reference: GluonTS's own Trainer in one process, its best
    # thread setting. Our Trainer alone on one process is reported too: it
    # overlaps data loading with compute (more than one core), so it is the
    # harder reference.
    single = [n for n in same_batch if settings[n]["ranks"] == 1 and settings[n]["trainer"] == "gluonts"]
    best = max(single, key=lambda n: settings[n]["median_samples_per_s"])
    two = settings["mxplugin_2ranks"]
    ours = settings["mxplugin_1rank"]
    # 2 ranks with nothing lost: twice one process at the per-rank batch
    ceiling = 2 * settings["single_1thread_half"]["median_samples_per_s"]
    return {"target_loss": target, "settings": settings, "best_single": best,
            "ratio_2ranks_vs_best_single": two["median_samples_per_s"] / settings[best]["median_samples_per_s"],
            "ceiling_vs_best_single": ceiling / settings[best]["median_samples_per_s"],
            "ratio_2ranks_vs_ceiling": two["median_samples_per_s"] / ceiling,
            "time_ratio_best_single_vs_2ranks": settings[best]["median_time_to_target_s"]
            / two["median_time_to_target_s"],
            "ratio_2ranks_vs_mxplugin_1rank": two["median_samples_per_s"] / ours["median_samples_per_s"]}


def main():
    p = arguments(__doc__)
    p.add_argument("mode", choices=["all", "one"])
    p.add_argument("--setting", choices=sorted(SETTINGS))
    p.add_argument("--out")
    args = p.parse_args()
    if args.mode == "one":
        record = train_one(args.setting)
        if record is not None:
            with open(args.out, "w") as f:
                json.dump(record, f)
        return
    os.makedirs(RESULTS, exist_ok=True)
    runs = interleave({name: lambda name=name: launch(name) for name in SETTINGS}, ROUNDS, rotate=True)
    result = {"global_batch": GLOBAL_BATCH, "epochs": EPOCHS, "batches_per_epoch": BATCHES_PER_EPOCH,
              "series": SERIES, "rounds": ROUNDS, "runs": runs, "summary": summarise(runs)}
    write_result("gluonts_deepar.json", result)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
