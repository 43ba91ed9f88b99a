"""The GluonTS section of docs/benchmarks.md, from bench/results/gluonts_deepar.json."""
import os

LABELS = {
    "single_1thread": ("1 process, GluonTS's Trainer", "1"),
    "single_2threads": ("1 process, GluonTS's Trainer", "2 (OMP, 2 MXNet workers)"),
    "single_default": ("1 process, GluonTS's Trainer", "MXNet's defaults"),
    "mxplugin_1rank": ("1 process, mxplugin.gluonts.Trainer", "1"),
    "mxplugin_2ranks": ("2 ranks, mxplugin.gluonts.Trainer", "1 per rank"),
    "single_1thread_bulk": ("1 process, GluonTS's Trainer, whole passes as one engine segment", "1"),
    "single_1thread_half": ("1 process, GluonTS's Trainer, at the per-rank batch", "1"),
}


def gluonts_target(result):
    """The Targets table's row: 2 ranks against the best single process."""
    if not result:
        return None
    s = result["summary"]
    return ("GluonTS DeepAR, 2 ranks x 1 thread vs the best single process of GluonTS's Trainer (same global batch), "
            "samples/s",
            ">= 1.6", f"{s['ratio_2ranks_vs_best_single']:.3f}")


def gluonts_section(result):
    if not result:
        return []
    s = result["summary"]
    lines = ["## GluonTS DeepAR (`bench/gluonts_deepar.py`)", "",
             f"GluonTS's default DeepAR on {result['series']} artificial hourly series, global batch "
             f"{result['global_batch']}, {result['epochs']} epochs of {result['batches_per_epoch']} steps per run, "
             f"{result['rounds']} runs per setting in interleaved rounds. Samples/s: median over every epoch but "
             "each run's first; time to loss: median over runs of the time from the start of training to the "
             f"first epoch whose loss (averaged over ranks) is <= {s['target_loss']:.3f}, the lowest loss every run "
             "reached; accuracy: median over runs, held-out last day.", "",
             "| setting | threads | batch per process | samples/s | per-run medians | cores (rank 0) | time to loss "
             "| mean wQL | MASE | load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in s["settings"].items():
        what, threads = LABELS.get(name, (name, "?"))
        runs = ", ".join(f"{x:.0f}" for x in v["run_medians_samples_per_s"])
        cores = f"{v['median_cores_rank0']:.2f}" if "median_cores_rank0" in v else "-"
        batch = v.get("batch_per_rank", result["global_batch"] // v["ranks"])
        to_loss = "-" if v["median_time_to_target_s"] is None else f"{v['median_time_to_target_s']:.1f} s"
        lines.append(f"| {what} | {threads} | {batch} | {v['median_samples_per_s']:.0f} | {runs} | {cores} | "
                     f"{to_loss} | {v['median_wQuantileLoss']:.4f} | "
                     f"{v['median_MASE']:.3f} | {v['load_average_1min'][0]:.1f}-{v['load_average_1min'][1]:.1f} |")
    lines += ["", "Load: the machine's 1-minute load average before and after the runs (other work shares its "
              f"{os.cpu_count()} cores: 2 ranks need both, one process one, so load counts against 2 ranks more)."]
    best = s["best_single"]
    lines += ["", f"2 ranks against the best single process ({LABELS[best][0]}, {LABELS[best][1]} thread(s)): "
              f"**{s['ratio_2ranks_vs_best_single']:.3f}x** the samples/s, and "
              f"**{s['time_ratio_best_single_vs_2ranks']:.3f}x** as fast to the loss."]
    if "ceiling_vs_best_single" in s:
        half = s["settings"]["single_1thread_half"]["median_samples_per_s"]
        lines += ["", "What 2 ranks could reach: GluonTS's Trainer at the per-rank batch runs "
                  f"{half:.0f} samples/s in one process, so two of them with nothing lost to communication, the "
                  f"rounds or sharing the machine would give {2 * half:.0f}: **{s['ceiling_vs_best_single']:.3f}x** "
                  "the best single process. Halving the batch costs that much per sample (a DeepAR batch has a "
                  "large fixed cost: hundreds of small operators and the Python that drives them). 2 ranks reach "
                  f"**{s['ratio_2ranks_vs_ceiling']:.3f}** of it."]
    if "ratio_2ranks_vs_mxplugin_1rank" in s:
        lines += ["", "Against mxplugin.gluonts.Trainer alone on one process (which overlaps data loading with "
                  f"compute, using more than one core): **{s['ratio_2ranks_vs_mxplugin_1rank']:.3f}x**."]
    lines.append("")
    return lines
