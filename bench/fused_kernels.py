"""Fused optimizer kernel benchmark (one process, one thread):

    python bench/fused_kernels.py

On one flat float32 buffer of the resnet50_v1 parameter count (25,575,912
values), medians of --iters interleaved runs after warm-up, OMP_NUM_THREADS=1:

1. SGD with momentum: our kernel (raw entry on NumPy arrays, and the NDArray
   entry including its engine push and wait) against mx.nd.sgd_mom_update on
   the same buffers, and against the memory-bandwidth floor: the update
   streams 20 bytes per value (reads weight, grad, mom; writes mom, weight),
   and the floor is those bytes at the bandwidth of an in-place add
   (x += y: reads 8, writes 4 bytes per value), NumPy's and MXNet's
   elemwise_add(out=x). An update writes where it reads, so, unlike a copy
   into another buffer, it pays no write-allocate read of its destination; a
   copy's 8 bytes per value (numpy.copyto) are shown too, but its "bandwidth"
   leaves out that hidden read and understates what an in-place stream gets.
2. Our raw kernel for every other optimizer, with its own bytes floor.

Writes everything to bench/results/fused_kernels.json (or --output).
"""
import os

os.environ["OMP_NUM_THREADS"] = "1"  # before MXNet starts its thread pools

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

from harness import arguments, interleave, medians, spread, timed, write_result  # noqa: E402

# after harness, which puts this checkout on the path where no mxplugin is installed
from mxplugin._loader import core_module as core  # noqa: E402

RESNET50_VALUES = 25_575_912
SGD_MOM = dict(lr=0.1, momentum=0.9, wd=1e-4, rescale_grad=1.0 / 256)
# Per kind: parameters, and bytes streamed per value (4 per array read or written).
OTHER_KINDS = {
    "sgd": (dict(lr=0.1, wd=1e-4), 12),
    "nag_mom": (dict(lr=0.1, momentum=0.9, wd=1e-4), 20),
    "adam": (dict(lr=1e-3, wd=1e-4), 28),
    "rmsprop": (dict(lr=1e-3, wd=1e-4), 20),
    "rmspropalex": (dict(lr=1e-3, wd=1e-4), 36),
    "adagrad": (dict(lr=1e-2, wd=1e-4), 20),
    # two passes: (w, g, mean, var) read + (mean, var) written, then
    # (w, mean, var) read + w written
    "lamb": (dict(lr=1e-3, wd=1e-4, t=1), 40),
}


def median_times(cases, iters, warmup):
    """Times each case once per round, round-robin; returns all times and medians."""
    times = interleave({name: timed(fn) for name, fn in cases.items()}, iters, warmup)
    return times, medians(times)


def bench_sgd_mom(n, iters, warmup):
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal(n, dtype=np.float32)
    g_np = rng.standard_normal(n, dtype=np.float32)
    m_np = np.zeros(n, np.float32)
    copy_dst = np.zeros(n, np.float32)
    add_x, add_y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    w, g, m = mx.nd.array(w_np), mx.nd.array(g_np), mx.nd.zeros(n)
    w2, g2, m2 = mx.nd.array(w_np), mx.nd.array(g_np), mx.nd.zeros(n)
    a, b = mx.nd.array(add_x), mx.nd.array(add_y)
    mx.nd.waitall()

    def ours_ndarray():
        core.fused_update("sgd_mom", w, g, [m], SGD_MOM)
        w.wait_to_read()

    def mxnet_op():
        mx.nd.sgd_mom_update(w2, g2, m2, out=w2, **SGD_MOM)
        w2.wait_to_read()

    def elemwise_add():
        mx.nd.elemwise_add(a, b, out=a)
        a.wait_to_read()

    cases = {
        "ours_raw": lambda: core.fused_update_raw("sgd_mom", w_np, g_np, [m_np], SGD_MOM),
        "ours_ndarray": ours_ndarray,
        "mx.nd.sgd_mom_update": mxnet_op,
        "numpy.copyto": lambda: np.copyto(copy_dst, g_np),
        "numpy.add(out=x)": lambda: np.add(add_x, add_y, out=add_x),
        "mx.nd.elemwise_add(out=x)": elemwise_add,
    }
    times, med = median_times(cases, iters, warmup)
    copy_bw = 8 * n / med["numpy.copyto"]
    add_bw = 12 * n / med["numpy.add(out=x)"]
    mx_add_bw = 12 * n / med["mx.nd.elemwise_add(out=x)"]
    floor = 20 * n / add_bw
    return {
        "values": n, "bytes_streamed": 20 * n, "times_s": times, "median_s": med, "spread_s": spread(times),
        "copy_GBps": copy_bw / 1e9, "inplace_add_GBps": add_bw / 1e9, "mx_inplace_add_GBps": mx_add_bw / 1e9,
        "floor_s": floor, "floor_at_copy_GBps_s": 20 * n / copy_bw,
        "ratio_ours_raw_vs_mxnet": med["ours_raw"] / med["mx.nd.sgd_mom_update"],
        "ratio_ours_ndarray_vs_mxnet": med["ours_ndarray"] / med["mx.nd.sgd_mom_update"],
        "ratio_ours_raw_vs_floor": med["ours_raw"] / floor,
        "ratio_ours_ndarray_vs_floor": med["ours_ndarray"] / floor,
        "ratio_mxnet_vs_floor": med["mx.nd.sgd_mom_update"] / floor,
    }


def bench_other_kinds(n, iters, warmup, copy_bw):
    rng = np.random.default_rng(1)
    w = rng.standard_normal(n, dtype=np.float32) * 0.1
    g = rng.standard_normal(n, dtype=np.float32) * 0.1
    rows = {}
    for kind, (params, bytes_per_value) in OTHER_KINDS.items():
        states = [np.zeros(n, np.float32) for _ in range(core.fused_num_states(kind))]
        if kind == "rmspropalex":
            states[0][:] = 1.0
        _, med = median_times({kind: lambda: core.fused_update_raw(kind, w, g, states, params)}, iters, warmup)
        floor = bytes_per_value * n / copy_bw
        rows[kind] = {"median_s": med[kind], "bytes_streamed": bytes_per_value * n, "floor_s": floor,
                      "ratio_vs_floor": med[kind] / floor}
    return rows


def main():
    p = arguments(__doc__, iters=10, warmup=2, output="fused_kernels.json")
    p.add_argument("--values", type=int, default=RESNET50_VALUES, help="buffer size (default: resnet50_v1)")
    args = p.parse_args()

    s = bench_sgd_mom(args.values, args.iters, args.warmup)
    med = s["median_s"]
    print(f"SGD momentum on {s['values']:,} float32 values ({s['bytes_streamed'] / 1e6:.0f} MB streamed), "
          f"OMP_NUM_THREADS=1, median of {args.iters}:")
    print(f"  numpy.copyto (8 B/value)     {med['numpy.copyto'] * 1e3:8.2f} ms   {s['copy_GBps']:6.2f} GB/s"
          f"   (20 B/value at this rate: {s['floor_at_copy_GBps_s'] * 1e3:.2f} ms)")
    print(f"  numpy x += y (12 B/value)    {med['numpy.add(out=x)'] * 1e3:8.2f} ms   "
          f"{s['inplace_add_GBps']:6.2f} GB/s")
    print(f"  mx.nd.elemwise_add(out=x)    {med['mx.nd.elemwise_add(out=x)'] * 1e3:8.2f} ms   "
          f"{s['mx_inplace_add_GBps']:6.2f} GB/s")
    print(f"  floor: 20 B/value at x += y  {s['floor_s'] * 1e3:8.2f} ms")
    print(f"  mx.nd.sgd_mom_update         {med['mx.nd.sgd_mom_update'] * 1e3:8.2f} ms   "
          f"{s['ratio_mxnet_vs_floor']:.2f}x floor")
    print(f"  ours, raw                    {med['ours_raw'] * 1e3:8.2f} ms   {s['ratio_ours_raw_vs_floor']:.2f}x floor"
          f"   {s['ratio_ours_raw_vs_mxnet']:.2f}x mxnet")
    print(f"  ours, NDArray (push + wait)  {med['ours_ndarray'] * 1e3:8.2f} ms   "
          f"{s['ratio_ours_ndarray_vs_floor']:.2f}x floor   {s['ratio_ours_ndarray_vs_mxnet']:.2f}x mxnet")

    others = bench_other_kinds(args.values, args.iters, args.warmup, s["inplace_add_GBps"] * 1e9)
    print("other kinds, ours raw:")
    for kind, row in others.items():
        print(f"  {kind:12s} {row['median_s'] * 1e3:8.2f} ms   floor {row['floor_s'] * 1e3:7.2f} ms   "
              f"{row['ratio_vs_floor']:.2f}x floor")

    write_result(args.output, {"omp_num_threads": 1, "sgd_mom": s, "other_kinds": others})


if __name__ == "__main__":
    main()
