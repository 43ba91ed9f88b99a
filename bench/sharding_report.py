"""The sharded-states section of docs/benchmarks.md, from
bench/results/sharding_*.json (bench/sharding.py, bench/sharding_oom.py)."""


def _mb(n):
    return f"{n / 1e6:.1f} MB"


def _span(values):
    lo, hi = min(values), max(values)
    return _mb(lo) if abs(hi - lo) < 0.05e6 else f"{_mb(lo)}-{hi / 1e6:.1f} MB"


def sharding_section(load):
    lines = ["## Sharded optimizer states (ZeRO-1), resnet50_v1 + Adam", "",
             "`bench/sharding.py` (results: `bench/results/sharding_*.json`), 2 shared cores, 1 thread per",
             "rank, 100 classes (23.7 M trainable parameters), 5 buckets of up to 25 MB. Peak RSS is the",
             "process's, after 3 steps; it includes MXNet, the model, activations and gradient buckets.", "",
             "| ranks | state bytes/rank, unsharded | sharded | peak RSS/rank, unsharded | sharded |",
             "|---|---|---|---|---|"]
    rows = 0
    for ranks in (1, 2, 3):
        full, part = load(f"sharding_memory_{ranks}_0.json"), load(f"sharding_memory_{ranks}_1.json")
        if not full or not part:
            continue
        rows += 1
        lines.append(f"| {ranks} | {_span([r['state_bytes'] for r in full['per_rank']])} | "
                     f"{_span([r['state_bytes'] for r in part['per_rank']])} | "
                     f"{_span([r['peak_rss_bytes'] for r in full['per_rank']])} | "
                     f"{_span([r['peak_rss_bytes'] for r in part['per_rank']])} |")
    if not rows:
        lines.append("| (not measured) | | | | |")
    t = load("sharding_time_2.json")
    if t:
        lines += ["", f"Step time, hybridized resnet50_v1 at 2 ranks (batch 4 per rank, 64x64, the two trainers' "
                      f"steps interleaved, median of {t['rounds']}): unsharded {t['unsharded_step_s'] * 1e3:.0f} ms, "
                      f"sharded {t['sharded_step_s'] * 1e3:.0f} ms, ratio **{t['ratio']:.3f}** (target 1.05)."]
        if "update_ratio" in t:
            lines += [f"The optimizer kernels alone: {t['unsharded_update_s'] * 1e3:.1f} ms over whole buckets, "
                      f"{t['sharded_update_s'] * 1e3:.1f} ms over this rank's slices: **{t['update_ratio']:.3f}** "
                      "(1/N = 0.5)."]
    o = load("sharding_oom.json")
    if o:
        lines += ["", f"A model that needs sharding (`bench/sharding_oom.py`): an MLP of 4 Dense layers of width "
                      f"{o['width']} ({o['parameters'] / 1e6:.0f} M parameters, Adam) at {o['ranks']} ranks. Each "
                      f"job runs in a memory cgroup of its own: peak {_mb(o['peak_bytes_unsharded'])} unsharded, "
                      f"{_mb(o['peak_bytes_sharded'])} sharded without a limit; with the limit halfway "
                      f"({_mb(o['limit_bytes'])}) the unsharded job "
                      f"{'trains' if o['unsharded_trained'] else 'is ended'} (exit code {o['unsharded_exit_code']}) "
                      f"and the sharded one {'trains' if o['sharded_trained'] else 'fails'} "
                      f"(exit code {o['sharded_exit_code']})."]
    return lines + [""]
