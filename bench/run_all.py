"""Runs every benchmark and writes docs/benchmarks.md (tables, and PNG plots
when matplotlib is installed: `pip install -e '.[bench]'`).

    python bench/run_all.py            # everything, ~33 minutes on 2 cores
    python bench/run_all.py --report   # only re-render the report from bench/results/

bench/results/*.json are committed: the report is rendered from them, and
--report refuses to run when any is missing rather than write a shorter one.
"""
import importlib.util
import os
import platform
import re
import statistics
import subprocess
import sys

from harness import HERE, REPO, arguments, read_result, write_result
from jobs import check, mpi_command
from plots import pyplot, save
from headline import allreduce_ratios, best_plain, single_2threads, write_pages as write_headlines

# tests/, on the path through harness
from mpi_harness import rank_env
from powersgd_report import powersgd_section, powersgd_targets
from report_multi_host import multi_host_section
from gluonts_report import gluonts_section, gluonts_target
from report_gpu import gpu_section
from latency import budget_target as latency_target, report_section as latency_section
from tp_small import report_section as tp_small_section
from sync_batchnorm import report_section as sync_batchnorm_section
from sockeye_exits import report_section as sockeye_exits_section
from sparse_rows import report_section as sparse_rows_section
from autotune import report_section as autotune_section
from module_horovod import report_section as module_horovod_section
from steadiness import report_section as steadiness_section
from sharding_report import sharding_section
from report_clusters import fault_timings_section, mpi_variants_section
import core_builds
from tensor_parallel import report_section as tensor_parallel_section
from scaling_report import PHASES, breakdown_section, scaling_section

DOCS = os.path.join(REPO, "docs")

EXAMPLE = os.path.join(REPO, "examples", "mxnet_imagenet_resnet50.py")
EXAMPLE_ARGS = ["--batch-size", "8", "--image-size", "112", "--num-batches", "12", "--num-epochs", "1",
                "--hybridize", "--log-interval", "4"]


def run(np_, args, timeout=1800, threads=1):
    """Runs a benchmark on np_ ranks (np_ == 1: a plain process), each rank with
    OMP_NUM_THREADS=threads."""
    cmd = mpi_command(np_, [sys.executable, *args])
    print("$", f"OMP_NUM_THREADS={threads}", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, env=rank_env({"OMP_NUM_THREADS": threads}), cwd=REPO,
                         timeout=timeout)
    sys.stdout.write(out.stdout[-3000:])
    check(out, f"benchmark {' '.join(args)}")
    return out.stdout + out.stderr


def example_throughput(np_, threads=1, batch_size=None):
    """Median of the example's per-interval 'total img/s' after the first interval."""
    args = list(EXAMPLE_ARGS)
    if batch_size is not None:
        args[args.index("--batch-size") + 1] = str(batch_size)
    text = run(np_, [EXAMPLE] + args, threads=threads)
    rates = [float(v) for v in re.findall(r"total img/s[=: ]+([0-9.]+)", text)]
    if not rates:
        raise SystemExit("the example printed no 'total img/s' lines")
    rates = sorted(rates[1:] or rates)
    return {"ranks": np_, "threads": threads, "batch_per_rank": int(args[args.index("--batch-size") + 1]),
            "images_per_s": rates, "median_images_per_s": statistics.median(rates)}


def single_process(tag):
    """The user's alternative to 2 ranks on this 2-core machine: one process
    with 2 threads on the same global batch (16)."""
    run(1, [os.path.join(HERE, "trainer.py"), "single", "--batch-size", "16", "--tag", tag], threads=2)


def run_all():
    # The standalone MPI reference just before and just after the library's
    # allreduce benchmark; the report counts the better of the two medians.
    run(1, [os.path.join(HERE, "mpi_plain.py"), "--ranks", "2", "--tag", "before"])
    run(2, [os.path.join(HERE, "allreduce.py")])
    run(1, [os.path.join(HERE, "mpi_plain.py"), "--ranks", "2", "--tag", "after"])
    run(1, [os.path.join(HERE, "trainer.py"), "update"])
    run(1, [os.path.join(HERE, "fused_kernels.py")])
    run(1, [os.path.join(HERE, "step_breakdown.py")])
    run(2, [os.path.join(HERE, "step_breakdown.py")])
    single_process("2threads_before")
    run(2, [os.path.join(HERE, "trainer.py"), "scaling"])
    run(2, [os.path.join(HERE, "powersgd.py")])
    run(1, [os.path.join(HERE, "powersgd_work.py")])
    if os.geteuid() == 0:  # fake hosts need network namespaces
        run(1, [os.path.join(HERE, "multi_host.py")])
        run(1, [os.path.join(HERE, "powersgd_hosts.py"), "all"])  # starts its own 2- and 4-rank jobs
        run(1, [os.path.join(HERE, "each_mpi.py")])  # builds against each MPI, starts their jobs
        run(1, [os.path.join(HERE, "fault_timings.py")])
    single_process("2threads_after")
    run(1, [os.path.join(HERE, "tensor_parallel.py")])  # starts its own 1- and 2-rank runs
    run(1, [os.path.join(HERE, "latency.py")])  # starts its own jobs and the plain MPI program
    run(1, [os.path.join(HERE, "tp_small.py")])  # starts its own jobs
    run(1, [os.path.join(HERE, "sync_batchnorm.py")])  # starts its own 2-rank jobs
    if importlib.util.find_spec("sockeye") is not None:  # installed by hand: bench/sockeye_exits.py --help
        run(1, [os.path.join(HERE, "sockeye_exits.py")])
    else:
        print("sockeye is not importable: bench/results/sockeye_exits.json is left as it is", flush=True)
    run(1, [os.path.join(HERE, "sparse_rows.py")])  # starts its own 2- and 3-rank jobs
    run(1, [os.path.join(HERE, "autotune.py")])  # starts its own jobs (and fake hosts, where it can)
    run(1, [os.path.join(HERE, "steadiness.py")])  # starts its own jobs, spread over minutes
    horovod = os.environ.get("MXPLUGIN_BENCH_HOROVOD_PYTHON")  # a venv's python holding horovod 0.28.1
    if horovod:
        run(1, [os.path.join(HERE, "module_horovod.py"), "all", "--horovod-python", horovod])
    else:
        print("MXPLUGIN_BENCH_HOROVOD_PYTHON is not set: bench/results/module_horovod.json is left as it is",
              flush=True)
    if importlib.util.find_spec("gluonts") is not None:  # the gluonts extra
        run(1, [os.path.join(HERE, "gluonts_deepar.py"), "all"])  # starts its own jobs, with their threads
    else:
        print("gluonts is not installed (pip install -e '.[gluonts]'): bench/results/gluonts_deepar.json is "
              "left as it is", flush=True)
    example = {"1": example_throughput(1), "1x2threads": example_throughput(1, threads=2, batch_size=16),
               "2": example_throughput(2)}
    example["scaling_efficiency"] = (example["2"]["median_images_per_s"] /
                                     (2 * example["1"]["median_images_per_s"]))
    example["vs_one_process_all_cores"] = (example["2"]["median_images_per_s"] /
                                           example["1x2threads"]["median_images_per_s"])
    write_result("example.json", example)


# What the two allreduce references mean, carried by every regenerated report.
REFERENCE_NOTE = [
    "About the references. **Standalone MPI** is `bench/mpi_plain.c`: a separate plain C program",
    "(`MPI_Init`, so single-threaded MPI; no mxplugin, no MXNet, no Python) timing one in-place",
    "`MPI_Allreduce` of the whole buffer after a barrier, the slowest rank's time per call. It runs three",
    "times just before and three times just after `bench/allreduce.py`, and the best of its six medians is",
    "the reference, so a noisy moment counts against mxplugin, not for it (one run of it sometimes takes",
    "twice as long throughout). **In-process data plane** is one allreduce of",
    "the same buffer by mxplugin's background thread inside the benchmark processes, through the world's",
    "data plane: since both ranks share this machine, that is the hierarchical shared-memory allreduce",
    "(Note [Hierarchical allreduce]); kept as a second column, not as the reference. The grouped call",
    "costs more than that one buffer by its overhead: the Python call and the engine op, negotiation of",
    "193 names, and 193 buffers walked in place (no fusion copies on the shared-memory data plane).",
    "",
]

# Every result file the report is rendered from (bench/results/, committed).
REQUIRED = ("allreduce.json", "mpi_plain_before.json", "mpi_plain_after.json", "trainer_update.json",
            "fused_kernels.json", "step_breakdown_1ranks.json", "step_breakdown_2ranks.json",
            "trainer_scaling.json", "trainer_single_2threads_before.json", "trainer_single_2threads_after.json",
            "example.json", "tensor_parallel.json", "gluonts_deepar.json", "latency.json",
            "tp_small.json", "sparse_rows.json", "sync_batchnorm.json")


def plots(allreduce, breakdown, plain):
    plt = pyplot()
    if plt is None:
        return []
    made = []
    if allreduce and allreduce.get("curve"):
        rows = allreduce["curve"]
        sizes = [r["bytes"] for r in rows]
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.plot(sizes, [r["bytes"] / plain[r["bytes"]] / 1e9 for r in rows], "o-",
                label="standalone MPI_Allreduce (plain C program)")
        ax.plot(sizes, [r["mxplugin_GBps"] for r in rows], "s-", label="mxplugin allreduce_")
        ax.plot(sizes, [r["raw_mpi_GBps"] for r in rows], "x:", color="grey",
                label="data plane inside the mxplugin process")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("algorithm bandwidth (GB/s)")
        ax.set_title(f"allreduce, {allreduce['ranks']} ranks")
        ax.legend()
        ax.grid(alpha=0.3)
        made.append(save(fig, DOCS, "allreduce_curve.png"))
    if breakdown:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        labels = [f"{b['ranks']} rank{'s' if b['ranks'] > 1 else ''}" for b in breakdown]
        bottom = [0.0] * len(breakdown)
        for phase in PHASES:
            vals = [b["median_s"].get(phase, 0.0) * 1e3 for b in breakdown]
            ax.bar(labels, vals, bottom=bottom, label=PHASES[phase])
            bottom = [a + v for a, v in zip(bottom, vals)]
        ax.set_ylabel("ms per step (median)")
        ax.set_title("resnet50_v1 step time by phase")
        ax.legend()
        made.append(save(fig, DOCS, "step_breakdown.png"))
    return made


def _targets(ar, upd, sc, plain, single2, gluonts=None, more=()):
    rows = []
    if ar:
        r = allreduce_ratios(ar, plain)
        rows.append(("grouped_allreduce_ / standalone MPI_Allreduce (resnet50 gradients, 2 ranks)", "<= 1.15",
                     f"{r['grouped']:.3f}"))
        rows.append(("per-tensor allreduce_ / standalone MPI_Allreduce", "<= 1.15", f"{r['per_tensor']:.3f}"))
    if upd:
        rows.append(("DistributedTrainer.step / gluon.Trainer.step (1 process, 1 thread)", "<= 0.5",
                     f"{upd['ratio_vs_gluon']:.3f}"))
    if sc:
        rows.append(("per-rank scaling efficiency, 2 ranks x 1 thread vs 1 process x 1 thread", ">= 0.97",
                     f"{sc['scaling_efficiency']:.3f}"))
        if "efficiency_against_ceiling" in sc:
            rows.append(("2 ranks' images/s / 2 ranks that never exchange (the machine's ceiling)", ">= 0.97",
                         f"{sc['efficiency_against_ceiling']:.3f}"))
        if single2:
            rows.append(("2 ranks x 1 thread vs 1 process x 2 threads (same global batch), images/s", "> 1.0",
                         f"{sc['median_images_per_s']['mxplugin'] / single2['median_images_per_s']:.3f}"))
        rows.append(("allreduce + update / per-tensor allreduce_ + gluon update", "<= 0.6",
                     f"{sc['allreduce_update_ratio']:.3f}"))
    if gluonts_target(gluonts):
        rows.append(gluonts_target(gluonts))
    rows += more
    if not rows:
        return []
    out = ["## Targets", "", "| measure | target | measured | met |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {target_met(b, c)} |" for a, b, c in rows]
    return out + [""]


def target_met(target, measured):
    """"yes", "**missed**" or "not measured", for a target written as an
    operator and a number ("<= 1.15", "> 1.0")."""
    try:
        value = float(measured)
    except ValueError:
        return "not measured"
    op, _, bound = target.partition(" ")
    met = {"<=": value <= float(bound), ">=": value >= float(bound), "<": value < float(bound),
           ">": value > float(bound)}[op]
    return "yes" if met else "**missed**"


def report():
    missing = [name for name in REQUIRED if read_result(name) is None]
    if missing:
        raise SystemExit(f"bench/results/ lacks {', '.join(missing)}: run `python bench/run_all.py` (all "
                         "benchmarks) first; docs/benchmarks.md is left as it is")
    ar, upd, fk = read_result("allreduce.json"), read_result("trainer_update.json"), read_result("fused_kernels.json")
    sc, ex = read_result("trainer_scaling.json"), read_result("example.json")
    plain, single2 = best_plain(), single_2threads()
    breakdown = [b for b in (read_result("step_breakdown_1ranks.json"), read_result("step_breakdown_2ranks.json")) if b]
    images = plots(ar, breakdown, plain)
    lines = ["# Benchmarks", "",
             "Written by `python bench/run_all.py` from `bench/results/*.json` (committed; `--report` re-renders",
             "this page from them). Every number is a median of repeated runs, compared with a reference",
             "measured in the same run. Unless a row says otherwise each process runs with OMP_NUM_THREADS=1.",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.", ""]
    lines += _targets(ar, upd, sc, plain, single2, read_result("gluonts_deepar.json"),
                      powersgd_targets(read_result) + latency_target(read_result("latency.json")))
    if ar:
        g = ar["gradient_set"]
        m = g["median_s"]
        r = allreduce_ratios(ar, plain)
        lines += ["## Allreduce of the resnet50_v1 gradient set (`bench/allreduce.py`, 2 ranks)", "",
                  f"{g['tensors']} float32 tensors, {g['values']:,} values ({g['bytes'] / 1e6:.1f} MB).", "",
                  "| method | median | ratio to standalone MPI | ratio to in-process data plane |",
                  "|---|---|---|---|",
                  f"| standalone `MPI_Allreduce` (plain C program, one buffer, in place) | "
                  f"{r['reference_s'] * 1e3:.2f} ms | 1.00 | |",
                  f"| in-process data plane (mxplugin's thread, same buffer) | {m['raw_mpi'] * 1e3:.2f} ms | "
                  f"{m['raw_mpi'] / r['reference_s']:.3f} | 1.00 |",
                  f"| `grouped_allreduce_` | {m['grouped_allreduce_'] * 1e3:.2f} ms | {r['grouped']:.3f} | "
                  f"{g['ratio_grouped']:.3f} |",
                  f"| per-tensor `allreduce_` + `waitall` | {m['per_tensor_allreduce_'] * 1e3:.2f} ms | "
                  f"{r['per_tensor']:.3f} | {g['ratio_per_tensor']:.3f} |", ""]
        if ar.get("curve"):
            lines += ["Message-size curve (one tensor, median per call):", "",
                      "| bytes | standalone MPI | mxplugin | ratio | in-process data plane |", "|---|---|---|---|---|"]
            for row in ar["curve"]:
                ref = plain[row["bytes"]]
                lines.append(f"| {row['bytes']:,} | {ref * 1e6:.1f} us | {row['mxplugin_s'] * 1e6:.1f} us | "
                             f"{row['mxplugin_s'] / ref:.2f} | {row['raw_mpi_s'] * 1e6:.1f} us |")
            lines.append("")
        if "allreduce_curve.png" in images:
            lines += ["![allreduce bandwidth](allreduce_curve.png)", ""]
        lines += REFERENCE_NOTE
    if upd:
        m = upd["median_s"]
        lines += ["## Optimizer step, 1 process (`bench/trainer.py update`)", "",
                  f"resnet50_v1 parameters ({upd['values']:,} values), SGD momentum 0.9 + wd.", "",
                  "One process, one thread (OMP_NUM_THREADS=1).", "",
                  "| | median | vs bandwidth floor |", "|---|---|---|",
                  f"| `gluon.Trainer.step` | {m['gluon'] * 1e3:.2f} ms | {upd['gluon_vs_floor']:.2f}x |",
                  f"| `DistributedTrainer.step` | {m['mxplugin'] * 1e3:.2f} ms | {upd['mxplugin_vs_floor']:.2f}x |"]
        if "mxnet_multi_ops" in m:
            lines.append(f"| `DistributedTrainer.step`, `fused_update=False`: MXNet's multi-tensor ops "
                         f"(chunks of {upd['aggregate_num']}), the GPU buckets' path | {m['mxnet_multi_ops'] * 1e3:.2f} ms | "
                         f"{upd['mxnet_multi_ops_vs_floor']:.2f}x |")
        lines += [
                  f"| floor: {upd['bytes_moved'] / 1e6:.0f} MB at the `a += b` rate "
                  f"({upd['stream_bandwidth_Bps'] / 1e9:.1f} GB/s) | {upd['floor_s'] * 1e3:.2f} ms | 1.00x |", "",
                  f"Ratio DistributedTrainer / gluon.Trainer: **{upd['ratio_vs_gluon']:.3f}**.", ""]
    if fk:
        sm = fk["sgd_mom"]
        lines += ["## Fused optimizer kernels (`bench/fused_kernels.py`, 1 process)", "",
                  f"One flat float32 buffer of {sm['values']:,} values; the floor streams the bytes each update "
                  "must move at the measured rate of an in-place NumPy `a += b`.", "",
                  "| update | median | vs floor |", "|---|---|---|"]
        m = sm["median_s"]
        lines.append(f"| sgd_mom, core kernel (raw pointers) | {m['ours_raw'] * 1e3:.2f} ms | "
                     f"{sm['ratio_ours_raw_vs_floor']:.2f}x |")
        lines.append(f"| sgd_mom, core kernel as an MXNet engine op | {m['ours_ndarray'] * 1e3:.2f} ms | "
                     f"{m['ours_ndarray'] / sm['floor_s']:.2f}x |")
        lines.append(f"| `mx.nd.sgd_mom_update` | {m['mx.nd.sgd_mom_update'] * 1e3:.2f} ms | "
                     f"{m['mx.nd.sgd_mom_update'] / sm['floor_s']:.2f}x |")
        for kind, r in fk.get("other_kinds", {}).items():
            lines.append(f"| {kind}, core kernel | {r['median_s'] * 1e3:.2f} ms | {r['ratio_vs_floor']:.2f}x |")
        lines.append("")
    lines += breakdown_section(breakdown, images)
    lines += scaling_section(sc, single2, breakdown)
    if ex:
        lines += ["## ResNet50 example (`examples/mxnet_imagenet_resnet50.py`, synthetic data)", "",
                  f"Arguments: `{' '.join(EXAMPLE_ARGS)}`.", "",
                  "| ranks | threads per rank | batch per rank | total images/s |", "|---|---|---|---|",
                  f"| 1 | 1 | {ex['1']['batch_per_rank']} | {ex['1']['median_images_per_s']:.1f} |",
                  f"| 1 | {ex['1x2threads']['threads']} | {ex['1x2threads']['batch_per_rank']} | "
                  f"{ex['1x2threads']['median_images_per_s']:.1f} |",
                  f"| 2 | 1 | {ex['2']['batch_per_rank']} | {ex['2']['median_images_per_s']:.1f} |", "",
                  f"Per-rank scaling efficiency (2 ranks x 1 thread vs 1 x 1): **{ex['scaling_efficiency']:.3f}**; "
                  f"2 ranks against one process with 2 threads on the same global batch: "
                  f"**{ex['vs_one_process_all_cores']:.3f}**.", ""]
    lines += latency_section(read_result("latency.json"))
    lines += tp_small_section(read_result("tp_small.json"))
    lines += sync_batchnorm_section(read_result("sync_batchnorm.json"))
    lines += sockeye_exits_section(read_result("sockeye_exits.json"))
    lines += sparse_rows_section(read_result("sparse_rows.json"))
    lines += autotune_section(read_result("autotune.json"))
    lines += steadiness_section(read_result("steadiness.json"))
    lines += module_horovod_section(read_result("module_horovod.json"))
    lines += tensor_parallel_section(read_result("tensor_parallel.json"))
    lines += gluonts_section(read_result("gluonts_deepar.json"))
    lines += multi_host_section(read_result("multi_host.json"), DOCS)
    lines += powersgd_section(read_result, DOCS)
    lines += gpu_section(DOCS)
    lines += sharding_section(read_result)
    lines += mpi_variants_section(read_result("mpi_variants.json"), DOCS)
    lines += fault_timings_section(read_result("fault_timings.json"))
    lines += core_builds.section(
        read_result("reduction_order.json"), "The cost of a fixed reduction order",
        "Note [Fixed reduction order]: the core before it (`before`: the shared-memory allreduce starts each "
        "slice from its owner's input, flat MPI reduces with `MPI_Allreduce`) and after it (`after`: rank "
        "order everywhere; flat MPI over 3+ ranks reduced by mxplugin over `MPI_Alltoallv` and "
        "`MPI_Allgatherv`). resnet50_v1's 193 gradients (102 MB) by `grouped_allreduce_` and by a per-tensor "
        "`allreduce_` loop, and `DistributedTrainer.step()` (its allreduce and update) of a hybridized "
        "resnet50_v1, batch 4 per rank at 64x64.")
    lines += core_builds.section(
        read_result("exchange_pairwise.json"), "The ordered reductions' exchange, one peer at a time",
        "Note [Pairwise exchange]: flat MPI over 3+ ranks moving each rank's blocks by `MPI_Alltoallv` "
        "(`alltoallv`, the core of the section above) and by one `MPI_Sendrecv` per peer and step "
        "(`pairwise`, which survives a peer killed mid-exchange: docs/reliability.md). The same measures.")
    with open(os.path.join(DOCS, "benchmarks.md"), "w") as f:
        f.write("\n".join(lines))
    print("wrote docs/benchmarks.md")
    write_headlines()


def main():
    p = arguments(__doc__)
    p.add_argument("--report", action="store_true", help="only render docs/benchmarks.md from existing results")
    args = p.parse_args()
    if not args.report:
        run_all()
    report()


if __name__ == "__main__":
    main()
