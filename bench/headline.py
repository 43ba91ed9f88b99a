"""The headline figures of the README and the docs' landing page, rendered
from bench/results/ as docs/benchmarks.md is (bench/run_all.py writes all
three), so that no page says more than the benchmarks show.

    python bench/headline.py          # rewrites the tables in README.md and docs/index.md

Each page holds its table between HEADLINE_START and HEADLINE_END; a test
(tests/test_bench_harness.py) fails when either differs from `table()`.
"""
import json
import os
import statistics

from harness import REPO, RESULTS, read_result

HEADLINE_START = "<!-- headline figures: rendered by bench/headline.py from bench/results/ -->"
HEADLINE_END = "<!-- end of headline figures -->"
PAGES = (os.path.join(REPO, "README.md"), os.path.join(REPO, "docs", "index.md"))


def best_plain(load=read_result):
    """{bytes: median seconds} of the standalone MPI program: the better of
    the runs before and after the library's benchmark, size by size."""
    best = {}
    for tag in ("before", "after"):
        for row in (load(f"mpi_plain_{tag}.json") or {}).get("sizes", []):
            best[row["bytes"]] = min(best.get(row["bytes"], float("inf")), row["median_s"])
    return best


def allreduce_ratios(ar, plain):
    """The gradient set's medians against the standalone reference."""
    g = ar["gradient_set"]
    ref = plain[g["bytes"]]
    m = g["median_s"]
    return {"reference_s": ref, "grouped": m["grouped_allreduce_"] / ref,
            "per_tensor": m["per_tensor_allreduce_"] / ref}


def single_2threads(load=read_result):
    """The better of the 2-thread single-process runs before and after the scaling run."""
    runs = [r for r in (load(f"trainer_single_2threads_{tag}.json") for tag in ("before", "after")) if r]
    return max(runs, key=lambda r: r["median_images_per_s"]) if runs else None


def _gpu_copies():
    path = os.path.join(RESULTS, "gpu", "benchmarks.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        cases = json.load(f)["benchmarks"]["gpu_kernels"]["figures"]["cases"]
    return min(c["ratio_to_memcpy"] for c in cases
               if c["size_mb"] == 256 and c["dtype"] == "float32" and c["case"].startswith("batched"))


def rows(load=read_result):
    """[(what, figure, reference)], one per result file that is there."""
    out = []
    ar, plain = load("allreduce.json"), best_plain(load)
    if ar:
        r = allreduce_ratios(ar, plain)
        g = ar["gradient_set"]
        out.append((f"resnet50_v1's {g['tensors']} gradients ({g['bytes'] / 1e6:.0f} MB), 2 ranks on one host, "
                    "`grouped_allreduce_`",
                    f"{g['median_s']['grouped_allreduce_'] * 1e3:.1f} ms ({r['grouped']:.2f}x)",
                    f"{r['reference_s'] * 1e3:.1f} ms: one `MPI_Allreduce` of the same bytes in a separate plain "
                    "MPI program"))
    upd = load("trainer_update.json")
    if upd:
        out.append(("`DistributedTrainer.step`'s update, resnet50_v1, 1 process",
                    f"{upd['ratio_vs_gluon']:.2f}x the time, {upd['mxplugin_vs_floor']:.2f}x the memory-bandwidth "
                    "floor", "`gluon.Trainer.step`"))
    sc, single2 = load("trainer_scaling.json"), single_2threads(load)
    if sc:
        figure = f"{sc['scaling_efficiency']:.3f} per-rank efficiency (target 0.97)"
        reference = "1 process of 1 thread"
        if single2:
            figure += (f"; {sc['median_images_per_s']['mxplugin'] / single2['median_images_per_s']:.2f}x the "
                       f"images/s of 1 process of {single2['threads']} threads on the same global batch")
            reference += f"; 1 process of {single2['threads']} threads"
        out.append((f"hybridized resnet50_v1, batch {sc['batch_per_rank']} per rank, {sc['ranks']} ranks of 1 "
                    f"thread on {sc['ranks']} cores", figure, reference))
    link, exchange = load("powersgd_link_bytes.json"), load("powersgd_exchange.json")
    if link and exchange:
        b = link["median_link_bytes"]
        ratios = [(c["median_s"]["4"] / c["median_s"]["uncompressed"], c) for c in exchange["configurations"]
                  if c["median_s"].get("4") and c["median_s"].get("uncompressed")]
        best, where = min(ratios, key=lambda rc: rc[0])
        faster = sum(ratio < 1 for ratio, _ in ratios)
        worst = max(r for r, _ in ratios)
        if faster == len(ratios):
            rest = f"and faster in all {len(ratios)} layouts and rates measured (at most {worst:.2f}x)"
        else:
            rest = (f"but slower in {len(ratios) - faster} of the {len(ratios)} layouts and rates measured "
                    f"(up to {worst:.2f}x)")
        out.append(("PowerSGD rank 4, resnet50_v1's gradients between fake hosts",
                    f"{statistics.mean(b['uncompressed']) / statistics.mean(b['4']):.0f}x fewer bytes on the link; "
                    f"exchange {best:.2f}x the time at {where['layout']}, {where['rate_mbit'] / 1000:g} Gbit/s, "
                    + rest, "the uncompressed allreduce"))
    sparse = load("sparse_rows.json")
    if sparse and "2" in sparse["by_ranks"]:
        g = sparse["by_ranks"]["2"]
        out.append((f"a {sparse['rows'] // 1000000}M x {sparse['width']} embedding gradient, "
                    f"{sparse['touched']:.0%} of rows touched per rank, 2 ranks",
                    f"{g['ratio_time']:.2f}x the time, {g['ratio_bytes']:.2f}x the bytes", "the densified allreduce"))
    gpu = _gpu_copies()
    if gpu is not None:
        out.append(("GPU (H200): batched fusion copies in and out, 256 MB float32", f"{gpu:.2f}x the bandwidth",
                    "`cudaMemcpyAsync` of the same bytes"))
    return out


def table(load=read_result):
    """The headline table's lines, markers included."""
    lines = [HEADLINE_START, "", "| what | figure | reference |", "|---|---|---|"]
    lines += [f"| {what} | {figure} | {reference} |" for what, figure, reference in rows(load)]
    return lines + ["", HEADLINE_END]


def rendered_in(text):
    """The lines of `text` from HEADLINE_START to HEADLINE_END, or None."""
    lines = text.splitlines()
    if HEADLINE_START not in lines or HEADLINE_END not in lines:
        return None
    return lines[lines.index(HEADLINE_START):lines.index(HEADLINE_END) + 1]


def write_pages(pages=PAGES):
    """Puts `table()` between each page's markers."""
    new = table()
    for page in pages:
        with open(page) as f:
            text = f.read()
        old = rendered_in(text)
        if old is None:
            raise SystemExit(f"{page} has no {HEADLINE_START!r} ... {HEADLINE_END!r} lines")
        text = text.replace("\n".join(old), "\n".join(new))
        with open(page, "w") as f:
            f.write(text)
        print(f"wrote the headline figures of {os.path.relpath(page, REPO)}")


if __name__ == "__main__":
    write_pages()
