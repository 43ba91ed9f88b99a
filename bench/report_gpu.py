"""The GPU section of docs/benchmarks.md, from the GPU command's results files
(`python3 gpu/run_gpu_suite.py` on a GPU machine, copied to
bench/results/gpu/): suite.json (every GPU test) and benchmarks.json (the
GPU benchmarks' figures); the logs beside them hold the full output."""
import json
import os

from harness import RESULTS
from plots import pyplot, save

GPU_RESULTS = os.path.join(RESULTS, "gpu")


def _read(name):
    path = os.path.join(GPU_RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _kernel_plot(cases, target, docs):
    """Ratio to memcpy by buffer size, one line per case of float32; the
    file name, or None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.4))
    sizes = sorted({c["size_mb"] for c in cases})
    for name in dict.fromkeys(c["case"] for c in cases if c["case"] != "memcpy"):
        by_size = {c["size_mb"]: c["ratio_to_memcpy"] for c in cases if c["case"] == name and c["dtype"] == "float32"}
        ax.plot(sizes, [by_size[s] for s in sizes], marker="o", label=name)
    ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{s} MB" for s in sizes])
    ax.set_ylabel("bandwidth / cudaMemcpyAsync")
    ax.set_title("CUDA kernels, float32")
    ax.legend(fontsize=7, ncol=2)
    return save(fig, docs, "gpu_kernels.png")


def gpu_section(docs):
    suite, bench = _read("suite.json"), _read("benchmarks.json")
    lines = ["## GPU (`python3 gpu/run_gpu_suite.py`)", ""]
    if not suite and not bench:
        return lines + ["Not measured yet. On a GPU machine: `python3 gpu/run_gpu_suite.py` (docs/guides/gpus.md, Testing on a "
                        "GPU machine), then copy its results file and log to `bench/results/gpu/` as `suite.json` "
                        "(the tests) and `benchmarks.json` (the benchmarks).", ""]
    for what, result in (("The whole GPU command", suite), ("Benchmarks and the tests run with them", bench)):
        if not result:
            continue
        env = result["environment"]
        s = env["summary"]
        lines += [f"{what}: {s['gpu']}, driver {s['driver']}, CUDA {s['cuda_toolkit']} (runtime {s['cuda_runtime']}),"
                  f" NCCL {s['nccl']}, commit {env['git']['commit'][:7]}"
                  f"{' + working-tree changes' if env['git']['changed_files'] else ''}, {result['started']}.", "",
                  "| test file | passed | failed | skipped | seconds |", "|---|---|---|---|---|"]
        for name, t in result["tests"].items():
            reasons = "; ".join(f"{k} ({v})" for k, v in t["skip_reasons"].items())
            lines.append(f"| `{name}` | {t['passed']} | {t['failed'] + t['errors']} | {t['skipped']}"
                         f"{' (' + reasons + ')' if reasons else ''} | {t['seconds']:.1f} |")
        lines.append("")
    lines += ["2 and 3 NCCL ranks share the one GPU as fake hosts (GPU.md); `test_gpu_mxnet.py` needs a CUDA build of "
              "MXNet, which cannot run there (no sm_90 code).", ""]
    figures = {k: v["figures"] for k, v in (bench or {}).get("benchmarks", {}).items() if v.get("figures")}
    kernels = figures.get("gpu_kernels")
    if kernels:
        target = kernels["target_ratio_to_memcpy"]
        lines += [f"Kernels (`bench/gpu_kernels.py`): bandwidth (read + write) as a ratio to `cudaMemcpyAsync` device "
                  f"to device in the same run, target >= {target}; medians of {kernels['iters']} rounds of "
                  f"{kernels['reps']} launches timed with CUDA events behind a spin kernel (so the GPU's time, not "
                  "Python's enqueueing); the batched copies move 161 tensors of random sizes.", "",
                  "| dtype | MB | case | GB/s | ratio to memcpy | host enqueue per call |", "|---|---|---|---|---|---|"]
        for c in kernels["cases"]:
            lines.append(f"| {c['dtype']} | {c['size_mb']} | {c['case']} | {c['gb_per_s']:.0f} | "
                         f"{c['ratio_to_memcpy']:.3f} | {c.get('host_enqueue_s', 0) * 1e6:.1f} µs |")
        lines.append("")
        before = ((_read("benchmarks_64_per_launch.json") or {}).get("benchmarks", {}).get("gpu_kernels") or {})
        if before.get("figures"):
            old = {(c["dtype"], c["size_mb"], c["case"]): c["ratio_to_memcpy"] for c in before["figures"]["cases"]}
            lines += ["The batched copies before Note [Descriptors per launch] (64 descriptors a launch, so three "
                      "launches for 161 tensors; `benchmarks_64_per_launch.json`, same GPU model, same benchmark) "
                      "and now (one launch, commit c432056, which the device run carried as working-tree changes):", "",
                      "| dtype | MB | case | ratio, 64 a launch | ratio, one launch |", "|---|---|---|---|---|"]
            for c in kernels["cases"]:
                key = (c["dtype"], c["size_mb"], c["case"])
                if c["case"].startswith("batched") and key in old:
                    lines.append(f"| {c['dtype']} | {c['size_mb']} | {c['case']} | {old[key]:.3f} | "
                                 f"{c['ratio_to_memcpy']:.3f} |")
            lines.append("")
        plot = _kernel_plot(kernels["cases"], target, docs)
        if plot:
            lines += [f"![CUDA kernels against memcpy]({plot})", ""]
    runs = [f for k, f in sorted(figures.items()) if k.startswith("gpu_allreduce")]
    if runs:
        first = runs[0]
        lines += [f"Allreduce (`bench/gpu_allreduce.py`): {first['tensors']} tensors of ResNet-50's shapes, "
                  f"{first['bytes'] / 1e6:.1f} MB float32, through the core (one grouped call, or one call per "
                  f"tensor) against one raw `ncclAllReduce` of the whole buffer on a communicator of its own, "
                  f"same run, medians; MXPLUGIN_NUM_STREAMS={first['num_streams']}. Ranks past 1 are fake hosts on "
                  "one GPU, so NCCL goes over sockets on loopback: the core's two lanes (two communicators) "
                  "overlap where the one raw call cannot, which is why it beats the reference there; the ratio "
                  "says nothing about NVLink. At 1 rank the raw call has nothing to move and the figure is the "
                  "core's own cost.", "",
                  "| ranks | raw ncclAllReduce | grouped | ratio | per tensor | ratio |", "|---|---|---|---|---|---|"]
        for f in runs:
            m, r = f["median_seconds"], f["ratio_to_reference"]
            lines.append(f"| {f['ranks']} | {m['reference'] * 1e3:.2f} ms | {m['grouped'] * 1e3:.2f} ms | "
                         f"{r['grouped']:.3f} | {m['per_tensor'] * 1e3:.2f} ms | {r['per_tensor']:.3f} |")
        lines.append("")
    return lines
