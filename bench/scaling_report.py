"""docs/benchmarks.md's step-time and scaling sections, from
bench/results/step_breakdown_<N>ranks.json and trainer_scaling.json, and
the account of where the scaling run's distance from its ceiling goes."""
import os

# step_breakdown.py's phases, in step order, with their names on the page
PHASES = {"forward_backward": "forward+backward", "slowest_rank_wait": "waiting for the slowest rank",
          "communication": "communication", "update": "update"}


def breakdown_section(breakdown, images):
    if not breakdown:
        return []
    lines = ["## Step time by phase (`bench/step_breakdown.py`)", "",
             "Each phase alone (a barrier and `waitall` around it), median over steps. Waiting for the slowest "
             "rank: the barrier after forward+backward, the mean over ranks (each waits as long as it was faster).",
             "", "| ranks | " + " | ".join(PHASES.values()) + " |", "|---|" + "---|" * len(PHASES)]
    for b in breakdown:
        m = b["median_s"]
        lines.append(f"| {b['ranks']} | " + " | ".join(
            f"{m[k] * 1e3:.1f} ms" if k in m else "-" for k in PHASES) + " |")
    lines.append("")
    if "step_breakdown.png" in images:
        lines += ["![step breakdown](step_breakdown.png)", ""]
    return lines


def scaling_section(sc, single2, breakdown):
    if not sc:
        return []
    m, c = sc["median_images_per_s"], sc["median_allreduce_update_s"]
    lines = [f"## Scaling, {sc['ranks']} ranks (`bench/trainer.py scaling`, `single`)", "",
             f"resnet50_v1 hybridized (`static_alloc`, `static_shape`), batch {sc['batch_per_rank']} per rank, "
             f"3x{sc['image']}x{sc['image']}, SGD momentum. Per-rank efficiency compares {sc['ranks']} ranks of "
             "one thread each with one process of one thread (interleaved in the same job). The user's real "
             f"alternative on this {os.cpu_count()}-core machine is one process using every core on the "
             "global batch: measured as a separate process just before and after the scaling run, the "
             "better median counting.", "",
             "| | threads per process | images/s | ratio |", "|---|---|---|---|",
             f"| 1 process, gluon.Trainer, batch {sc['batch_per_rank']} | 1 | {m['single']:.1f} | |",
             f"| {sc['ranks']} ranks, DistributedTrainer | 1 | {m['mxplugin']:.1f} | per-rank efficiency "
             f"{sc['scaling_efficiency']:.3f} |",
             f"| {sc['ranks']} ranks, per-tensor allreduce_ + gluon update | 1 | {m['per_tensor']:.1f} | "
             f"per-rank efficiency {sc['scaling_efficiency_per_tensor']:.3f} |"]
    if "after_backward" in m:
        lines.append(f"| {sc['ranks']} ranks, DistributedTrainer, step() only once backward is done (no overlap) "
                     f"| 1 | {m['after_backward']:.1f} | per-rank efficiency "
                     f"{sc['scaling_efficiency_after_backward']:.3f} |")
    if "independent" in m:
        lines.append(f"| {sc['ranks']} ranks, DistributedTrainer each over itself alone, no exchange | 1 | "
                     f"{m['independent']:.1f} | the machine's ceiling {sc['scaling_ceiling']:.3f} |")
    if single2:
        lines.append(f"| 1 process, gluon.Trainer, batch {single2['batch']} (the global batch) | "
                     f"{single2['threads']} | {single2['median_images_per_s']:.1f} | {sc['ranks']} ranks / this: "
                     f"**{m['mxplugin'] / single2['median_images_per_s']:.3f}** |")
    if "independent" in m:
        lines += ["", f"The ceiling is what {sc['ranks']} ranks that never exchange a byte get on this machine "
                      "(each a DistributedTrainer over a process set of itself alone) against one gluon.Trainer "
                      "process alone. Its distance from 1.0 is not the exchange's: the ranks share the "
                      "machine's memory bandwidth and caches (below 1), and their fused update is faster than "
                      f"gluon.Trainer's (above 1). DistributedTrainer reaches **{sc['efficiency_against_ceiling']:.3f}**"
                      " of it: that gap is what the exchange between the ranks costs."]
        lines += _account(sc, breakdown)
    lines += ["",
              f"Allreduce + update per step: DistributedTrainer {c['mxplugin'] * 1e3:.1f} ms, per-tensor loop + "
              f"gluon {c['per_tensor'] * 1e3:.1f} ms, ratio **{sc['allreduce_update_ratio']:.3f}**.", ""]
    return lines


def _account(sc, breakdown):
    """Where the gap to the ceiling goes, from the step breakdown at the scaling run's size."""
    at = [b for b in breakdown or () if b["ranks"] == sc["ranks"] and "slowest_rank_wait" in b["median_s"]]
    if not at:
        return []
    b = at[0]["median_s"]
    own = b["forward_backward"] + b["update"]  # what ranks that never exchange do too
    predicted = own / (own + b["slowest_rank_wait"] + b["communication"])
    without_wait = own / (own + b["communication"])
    m = sc["median_images_per_s"]
    lines = ["", f"Where that gap goes (the step breakdown above, {sc['ranks']} ranks): ranks that never "
                 f"exchange skip two phases, the wait for the slowest rank's backward "
                 f"({b['slowest_rank_wait'] * 1e3:.1f} ms a step) and the gradient exchange "
                 f"({b['communication'] * 1e3:.1f} ms), so forward+backward and update alone predict "
                 f"{predicted:.3f} of the ceiling, against {sc['efficiency_against_ceiling']:.3f} measured."]
    if "after_backward" in m:
        lines[-1] += (f" Overlapping the exchange with backward does not hide it here: started only once "
                      f"backward is done, the same trainer gets {m['after_backward']:.1f} images/s against "
                      f"{m['mxplugin']:.1f} overlapped, because both cores are computing and the exchange "
                      "(102 MB through shared memory, at the data plane's speed above) needs one of them.")
    lines[-1] += (" The wait is that of every synchronous step: the ranks' backward times differ from step to "
                  "step on a shared machine, and only stale (asynchronous) updates would not wait, which would "
                  f"no longer give one process's weights. Without any wait, the exchange alone leaves "
                  f"{without_wait:.3f} of the ceiling.")
    return lines
