"""The PowerSGD section of docs/benchmarks.md and its plot (docs/powersgd.png),
from bench/results/powersgd.json (bench/powersgd.py: one host) and
powersgd_link_bytes.json, powersgd_exchange.json, powersgd_step.json
(bench/powersgd_hosts.py: fake hosts)."""
import os

from plots import pyplot, save

TARGET_BYTES_RATIO = 30  # at rank 4, uncompressed / PowerSGD bytes on the link
TARGET_TIME_RATIO = 0.1  # at 2 Gbit/s, PowerSGD / uncompressed exchange time
TARGET_WORK_RATIO = 2.0  # PowerSGD's own work on one thread / its floor, at every rank


def _ms(seconds):
    return "n/a" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _below(a, b):
    return a is not None and b is not None and a < b


def _ratio(a, b):
    return "n/a" if a is None or b is None else f"**{a / b:.2f}**"


def _mb(nbytes):
    return "-" if nbytes is None else f"{nbytes / 1e6:.2f} MB"


def _mean(values):
    return sum(values) / len(values)


def _load(row):
    lo, hi = row["load_average_1min"]
    return f"{lo:.1f}-{hi:.1f}"


def _break_even(rows, rank):
    """(layout, Gbit/s) where PowerSGD at `rank` would take as long as the
    uncompressed exchange, for each layout measured at two link rates with
    PowerSGD faster at the slower one and slower at the faster one: the
    uncompressed time taken linear in 1/rate between them, PowerSGD's as
    their mean (it hardly depends on the link)."""
    found = []
    for layout in dict.fromkeys(r["layout"] for r in rows):
        linked = sorted((r for r in rows if r["layout"] == layout and r["rate_mbit"]), key=lambda r: r["rate_mbit"])
        if len(linked) != 2 or not all(r["median_s"][rank] and r["median_s"]["uncompressed"] for r in linked):
            continue
        slow, fast = linked
        if not (slow["median_s"][rank] < slow["median_s"]["uncompressed"] and
                fast["median_s"][rank] > fast["median_s"]["uncompressed"]):
            continue
        compressed = (slow["median_s"][rank] + fast["median_s"][rank]) / 2
        x0, x1 = 1e3 / slow["rate_mbit"], 1e3 / fast["rate_mbit"]  # 1 / (Gbit/s)
        y0, y1 = slow["median_s"]["uncompressed"], fast["median_s"]["uncompressed"]
        x = x1 + (compressed - y1) * (x0 - x1) / (y0 - y1)
        found.append((layout, 1 / x))
    return found


def powersgd_targets(load):
    """The Targets table's rows (measure, target, measured)."""
    rows = []
    link, exchange, work = load("powersgd_link_bytes.json"), load("powersgd_exchange.json"), load("powersgd_work.json")
    if work:
        worst = max(work["ranks"], key=lambda r: work["ranks"][r]["core_vs_floor"])
        rows.append((f"PowerSGD's own work / its floor, one thread, worst of ranks {', '.join(work['ranks'])} "
                     f"(rank {worst})", f"<= {TARGET_WORK_RATIO:g}", f"{work['ranks'][worst]['core_vs_floor']:.2f}"))
    if link:
        b = link["median_link_bytes"]
        rows.append(("PowerSGD rank 4: uncompressed / compressed bytes on the link (resnet50_v1, 2 fake hosts)",
                     f">= {TARGET_BYTES_RATIO}", f"{_mean(b['uncompressed']) / _mean(b['4']):.1f}"))
    for row in (exchange or {}).get("configurations", []):
        if row["rate_mbit"] == 2000 and row["layout"] == "2 hosts x 2":
            m = row["median_s"]
            rows.append(("PowerSGD rank 4 exchange / uncompressed hierarchical allreduce (2 x 2 ranks, 2 Gbit/s)",
                         f"<= {TARGET_TIME_RATIO}", "n/a" if not (m["4"] and m["uncompressed"]) else
                         f"{m['4'] / m['uncompressed']:.3f}"))
    return rows


def _work_lines(work):
    """The table of PowerSGD's own work on one thread (bench/powersgd_work.py)."""
    lines = [f"**PowerSGD's own work** (`bench/powersgd_work.py`: one process, one thread, the reduction of the "
             f"{work['matrices']} compressed matrices, {work['values'] * 4 / 1e6:.1f} MB, in a world of one rank, "
             "so that the allreduces cost next to nothing). The floor is the larger of two: the bytes the method "
             "must move (24 per value: the gradient read and written once, the error buffer read and written "
             f"twice) at this run's in-place add bandwidth ({work['inplace_add_GBps']:.1f} GB/s), and its "
             "products (6r multiply-adds per value) at this run's single-threaded BLAS matrix product rate "
             f"({work['gemm_gfma_per_s']:.1f} G multiply-adds/s). \"core\" is the trainer's reduction (the core's "
             "passes, for float32 gradients on the CPU); \"MXNet operators\" the same reduction through MXNet's "
             "dot, gemm and elementwise operators, what GPU and float16 gradients still take.", "",
             "| rank | core | MXNet operators | floor (bytes / products) | core / floor | MXNet operators / floor |",
             "|---|---|---|---|---|---|"]
    for r, row in work["ranks"].items():
        lines.append(f"| {r} | {_ms(row['core_s'])} | {_ms(row['mxnet_ops_s'])} | {_ms(row['floor_s'])} "
                     f"({_ms(row['bytes_floor_s'])} / {_ms(row['products_floor_s'])}) | **{row['core_vs_floor']:.2f}** "
                     f"| {row['mxnet_ops_vs_floor']:.2f} |")
    return lines + [""]


def _plot(link, exchange, docs):
    plt = pyplot()
    if plt is None:
        return None
    panels = [p for p in (link, exchange) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8), squeeze=False)
    axes = list(axes[0])
    if link:
        ax = axes.pop(0)
        methods = list(link["median_link_bytes"])
        labels = ["none" if m == "uncompressed" else f"rank {m}" for m in methods]
        on_link = [_mean(link["median_link_bytes"][m]) / 1e6 for m in methods]
        given = [link["allreduce_input_bytes"][m] / 1e6 for m in methods]
        xs = range(len(methods))
        ax.bar([x - 0.2 for x in xs], on_link, width=0.4, label="sent on the link (counter)")
        ax.bar([x + 0.2 for x in xs], given, width=0.4, label="given to the allreduces")
        ax.set_yscale("log")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels)
        ax.set_xlabel("PowerSGD")
        ax.set_ylabel("MB per host per exchange")
        ax.set_title("resnet50_v1 gradients, 2 hosts x 1 rank")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    if exchange:
        ax = axes.pop(0)
        rows = exchange["configurations"]
        methods = list(rows[0]["median_s"])
        width = 0.8 / len(methods)
        for k, m in enumerate(methods):
            label = "uncompressed" if m == "uncompressed" else f"PowerSGD rank {m}"
            ax.bar([i + (k - (len(methods) - 1) / 2) * width for i in range(len(rows))],
                   [float("nan") if r["median_s"][m] is None else r["median_s"][m] * 1e3 for r in rows],
                   width=width, label=label)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([f"{r['layout']}\n{r['link'] if r['rate_mbit'] else 'no link'}" for r in rows],
                           fontsize=8)
        ax.set_ylabel("ms per exchange (median)")
        ax.set_title("gradient exchange, resnet50_v1")
        ax.set_ylim(top=1.25 * max(v * 1e3 for r in rows for v in r["median_s"].values() if v is not None))
        ax.legend(fontsize=8, loc="upper left", ncol=3)
        ax.grid(alpha=0.3, axis="y")
    return save(fig, docs, "powersgd.png")


def powersgd_section(load, docs):
    one, link = load("powersgd.json"), load("powersgd_link_bytes.json")
    exchange, step = load("powersgd_exchange.json"), load("powersgd_step.json")
    lines = ["## PowerSGD compression (`bench/powersgd.py`, `bench/powersgd_hosts.py`)", ""]
    if not (one or link or exchange or step):
        return lines + ["Not measured.", ""]
    lines += ["resnet50_v1's gradient set (102.3 MB float32); `Compression.powersgd(rank=r)` with its",
              "defaults (matrices whose rank-r factors are at least 2x smaller are compressed, the rest sent as",
              "they are). Every figure is a median, every ratio against the uncompressed exchange measured in the",
              "same run; fake hosts are network namespaces on this machine (`tests/fake_cluster.py`), traffic",
              "between them over TCP (`UCX_TLS=tcp,self`). Each rank has one thread; the machine's",
              f"{os.cpu_count()} cores and its memory bandwidth are shared by all ranks (4 ranks: 2 per core), so",
              "PowerSGD's own work (about six passes over the gradients' memory, three products with the",
              "factors) runs slower here than on hosts of their own.", ""]
    if link:
        b, given = link["median_link_bytes"], link["allreduce_input_bytes"]
        plain = _mean(b["uncompressed"])
        lines += ["**Bytes on the link** (2 hosts x 1 rank; each rank reads its host's interface counter, the one",
                  "`FakeCluster.tx_bytes` reads, between barriers around each exchange; median of "
                  f"{link['iterations']}). Between 2 hosts an allreduce sends its input about once per host.", "",
                  "| PowerSGD rank | sent per host on the link | given to the allreduces | fewer bytes than "
                  "uncompressed (link) |", "|---|---|---|---|"]
        for m, sent in b.items():
            ratio = plain / _mean(sent)
            label = "uncompressed" if m == "uncompressed" else m
            shown = f"**{ratio:.1f}x**" if m == "4" else f"{ratio:.1f}x"
            lines.append(f"| {label} | {' / '.join(_mb(x) for x in sent)} | {_mb(given[m])} | {shown} |")
        control = link.get("without_ucx_tls_tcp")
        lines += ["", f"The uncompressed exchange put {plain / given['uncompressed']:.3f}x its input on each link "
                      "(headers and the barriers included): the traffic crossed the links."]
        if control:
            lines.append(f"The same exchange without `UCX_TLS=tcp,self` sent "
                         f"{' / '.join(f'{x:,}' for x in control['median_link_bytes'])} bytes: UCX took shared "
                         "memory between the namespaces.")
        lines.append("")
    if exchange:
        rows = exchange["configurations"]
        ranks = [m for m in rows[0]["median_s"] if m != "uncompressed"]
        lines += ["**Exchange time** (compress + allreduces + decompress, what `DistributedTrainer` spends",
                  "reducing): 2 fake hosts with each host's link limited by `tc tbf`, 2 ranks per host (4 ranks on",
                  "the 2 cores) or 1 (a core each), and 4 ranks on one host (no link: shared memory). Uncompressed",
                  "is the grouped allreduce of the same gradients, hierarchical where a host has 2 ranks; the",
                  f"methods alternate iteration by iteration ({rows[0]['iterations']} each). Other work shares this",
                  "machine: for every exchange rank 0 counts the cores that processes outside the job kept busy,",
                  f"and the medians are over the exchanges during which that stayed below {rows[0]['quiet_cores']} "
                  "of a core (kept: their number; the medians of all exchanges are in the JSON).", "",
                  "| hosts x ranks | link | uncompressed | " + " | ".join(f"rank {r}" for r in ranks) + " | " +
                  " | ".join(f"rank {r} / uncompressed" for r in ranks) + " | kept | bytes per host per exchange "
                  "(uncompressed / rank 4) | load |",
                  "|---" * (5 + 2 * len(ranks)) + "|---|"]
        for row in rows:
            m = row["median_s"]
            sent = row.get("median_link_bytes")
            nbytes = (f"{_mb(_mean(sent['uncompressed']))} / {_mb(_mean(sent['4']))}" if row["rate_mbit"]
                      else "no link")
            kept = ", ".join(str(row["quiet_samples"][k]) for k in ["uncompressed", *ranks])
            lines.append(f"| {row['layout']} | {row['link']} | {_ms(m['uncompressed'])} | " +
                         " | ".join(_ms(m[r]) for r in ranks) + " | " +
                         " | ".join(_ratio(m[r], m["uncompressed"]) for r in ranks) +
                         f" | {kept} | {nbytes} | {_load(row)} |")
        paying = [f"{row['layout']} at {row['link']}" for row in rows
                  if all(_below(row["median_s"][r], row["median_s"]["uncompressed"]) for r in ranks)]
        lines += ["", "PowerSGD pays where its ratio is below 1: " +
                  (", ".join(paying) if paying else "in none of these configurations") + "."]
        for layout, rate in _break_even(rows, "4"):
            lines.append(f"For {layout}, rank 4 breaks even at about {rate:.1f} Gbit/s (the uncompressed time "
                         "interpolated linearly in 1/rate between the two links measured: an estimate).")
        lines += ["Load: the machine's 1-minute load average before and after each run.", ""]
    work = load("powersgd_work.json")
    if work:
        lines += _work_lines(work)
    if one:
        t = one["times_s"]
        lines += [f"One host, {one['ranks']} ranks of one thread each (`bench/powersgd.py`, not filtered for "
                  "other work): " + ", ".join(f"rank {r} {_ms(v[1])} against {_ms(v[0])} uncompressed "
                                              f"({v[1] / v[0]:.1f}x)" for r, v in t.items()) + ".", ""]
    if step:
        med, eff, kept = step["median_step_s"], step.get("efficiency", {}), step["quiet_samples"]
        parts, sent = step["median_parts_s"], step["link_bytes_per_step"]
        lines += [f"**Training step** (2 fake hosts x 1 rank, a core each, {step['link']}): hybridized resnet50_v1, "
                  f"batch {step['batch_per_rank']} per rank, 3x{step['image']}x{step['image']}, SGD momentum; "
                  f"{step['rounds']} rounds (after a warm-up round) in which each method takes "
                  f"{step['steps_per_round']} timed step(s) in turn, then one more timed in parts: forward + "
                  "backward, then `step()` (exchange + update) once every rank's backward is done. The reference "
                  "is one process alone (rank 0 with gluon.Trainer, the other rank waiting) on the same per-rank "
                  "batch; per-rank efficiency = its median step time / the distributed one's. Medians over the "
                  f"steps during which other work kept less than {step['quiet_cores']} of a core busy.", "",
                  "| | median step | per-rank efficiency | steps kept | forward + backward | `step()` | "
                  "link bytes per step (host 1 / host 2) |", "|---|---|---|---|---|---|---|"]
        for m in med:
            label = "1 process, gluon.Trainer" if m == "single" else f"2 ranks, DistributedTrainer, {m}"
            efficiency = "1" if m == "single" else (f"**{eff[m]:.3f}**" if m in eff else "n/a")
            p = parts.get(m, {})
            lines.append(f"| {label} | {_ms(med[m])} | {efficiency} | {kept[m]} of "
                         f"{len(step['samples'][m])} | {_ms(p.get('forward_backward'))} | {_ms(p.get('step_call'))} "
                         f"| {' / '.join(_mb(x) for x in sent[m])} |")
        lo, hi = step["load_average_1min"]
        lines += ["", f"The machine's 1-minute load average was {lo:.1f} before these steps and {hi:.1f} after.", ""]
    image = _plot(link, exchange, docs)
    if image:
        lines += [f"![PowerSGD bytes and exchange time]({image})", ""]
    return lines
