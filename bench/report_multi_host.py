"""The multi-host section of docs/benchmarks.md, rendered from
bench/results/multi_host.json (bench/multi_host.py), with its plot."""
from plots import pyplot, save


def _plot(result, docs):
    plt = pyplot()
    if plt is None:
        return None
    rows = sorted(result["two_hosts_2_ranks"], key=lambda r: r["rate_mbit"])
    rates = [r["rate_mbit"] / 1000 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, style, label in (("link_bound_s", "k--", "link-rate lower bound"),
                              ("plain_s", "o-", "plain MPI_Allreduce (C program)"),
                              ("flat_s", "s-", "mxplugin, flat MPI"),
                              ("hierarchical_s", "^-", "mxplugin, hierarchical")):
        points = [(rate, r[key] * 1e3) for rate, r in zip(rates, rows) if r[key] is not None]
        if points:
            ax.plot(*zip(*points), style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(rates)
    ax.set_xticklabels([f"{r:g}" for r in rates])
    ax.set_xlabel("link rate per host (Gbit/s)")
    ax.set_ylabel("ms per allreduce (median)")
    ax.set_title("resnet50_v1 gradients (102 MB), 2 hosts x 2 ranks")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, docs, "multi_host.png")


def multi_host_section(result, docs):
    lines = ["## Several hosts (`bench/multi_host.py`)", ""]
    if not result:
        return lines + ["Not measured: `bench/multi_host.py` needs root (network namespaces).", ""]
    one = result["one_host_2_ranks"]
    lines += [
        f"`grouped_allreduce_` of resnet50_v1's gradient set ({result['bytes'] / 1e6:.1f} MB), median per call.",
        "",
        "**1 host x 2 ranks** (this machine; MPI free to use its own shared memory), in "
        f"{len(one['rounds_s']['plain'])} interleaved rounds",
        "(this machine's memory bandwidth and CPU time vary from minute to minute, and noise only adds).",
        "The reference is the plain single-threaded `MPI_Allreduce` program of `bench/mpi_plain.c`. Each",
        "figure is the best round's median, the same rule for every method; the medians of the round",
        "medians are in the last column.", "",
        "| method | best round's median | ratio to plain MPI | median of rounds (ratio) |", "|---|---|---|---|"]
    mid = one.get("median_of_rounds_s", {})

    def row(label, key, bold=False):
        ratio = f"{one[key + '_s'] / one['plain_s']:.2f}"
        typical = (f"{mid[key] * 1e3:.1f} ms ({mid[key] / mid['plain']:.2f})" if key in mid else "n/a")
        return (f"| {label} | {one[key + '_s'] * 1e3:.1f} ms | {'**' + ratio + '**' if bold else ratio} | "
                f"{typical} |")

    lines += [row("plain `MPI_Allreduce` (C program)", "plain"),
              row("mxplugin, hierarchical (shared memory)", "hierarchical", bold=True),
              row("mxplugin, flat MPI (`MXPLUGIN_HIERARCHICAL_ALLREDUCE=0`)", "flat")]
    if "memory_pass_s" in one:
        lines += [
            row("memory floor: one read-and-write pass over each rank's buffer, both ranks at once "
                "(`mpi_plain --pass`)", "memory_pass"),
            "", "Any in-place allreduce reads each rank's input once and writes its output once, so the pass bounds",
            "it from below where memory bandwidth is the limit, as here (mxplugin's shared-memory data plane keeps",
            "the traffic between ranks in the shared cache; what it adds beyond the pass is that traffic, the",
            f"barriers and the call's overhead: hierarchical / pass = "
            f"{one['hierarchical_s'] / one['memory_pass_s']:.2f})."]
    lines += [
        "",
        "**2 hosts x 2 ranks** (fake hosts: a network namespace each, `tests/fake_cluster.py`), each host's",
        "link limited with `tc tbf`. All runs use `UCX_TLS=tcp,self` so that traffic between the fake hosts",
        "crosses the links (UCX would use shared memory between namespaces of one machine); within a host",
        "MPICH may still use its own shared-memory module, which these runs do not control. The lower bound:",
        "each host's link must carry the whole buffer once (reduce-scatter plus allgather between two hosts),",
        "so 102 MB / rate.", "",
        "| link | lower bound | plain MPI | flat | hierarchical | hierarchical / flat | hierarchical / bound |",
        "|---|---|---|---|---|---|---|"]
    ms = lambda v: "did not finish in 300 s" if v is None else f"{v * 1e3:.0f} ms"  # noqa: E731
    ratio = lambda a, b: "n/a" if a is None or b is None else f"**{a / b:.2f}**"  # noqa: E731
    for r in sorted(result["two_hosts_2_ranks"], key=lambda r: r["rate_mbit"]):
        lines.append(f"| {r['rate_mbit'] / 1000:g} Gbit/s | {ms(r['link_bound_s'])} | {ms(r['plain_s'])} | "
                     f"{ms(r['flat_s'])} | {ms(r['hierarchical_s'])} | {ratio(r['hierarchical_s'], r['flat_s'])} | "
                     f"{ratio(r['hierarchical_s'], r['link_bound_s'])} |")
    lines.append("")
    lines += ["Bytes each host sent on its link per run (all iterations, warm-up included):", "",
              "| link | plain MPI | flat | hierarchical |", "|---|---|---|---|"]
    for r in sorted(result["two_hosts_2_ranks"], key=lambda r: r["rate_mbit"]):
        fmt = lambda v: "n/a" if v is None else " / ".join(f"{b / 1e9:.2f} GB" for b in v)  # noqa: E731
        lines.append(f"| {r['rate_mbit'] / 1000:g} Gbit/s | {fmt(r['plain_tx_bytes'])} | {fmt(r['flat_tx_bytes'])} | "
                     f"{fmt(r['hierarchical_tx_bytes'])} |")
    lines.append("")
    image = _plot(result, docs)
    if image:
        lines += [f"![time against link rate]({image})", ""]
    lines += ["What this predicts at scale: `docs/scaling.md`.", ""]
    return lines
