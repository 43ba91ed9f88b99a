"""CUDA scale and batched-copy kernel benchmark (needs a GPU, CuPy and a
CUDA build of mxplugin):

    python bench/gpu_kernels.py [--sizes-mb 64 256 1024] [--dtypes float32 float16]

For each buffer size (64 MB and up: past the L2 cache) and dtype, on one
stream, timed with CUDA events: medians of --iters interleaved rounds after
--warmup rounds, each round timing every case once (--reps launches each).
Bandwidth counts the bytes read plus the bytes written.

Baselines, measured in the same run:
  memcpy        cudaMemcpyAsync device to device (the target: >= 0.9 of it)
  cupy_copy     CuPy's elementwise copy kernel (dst[...] = src)
Kernels (mxplugin._core raw entries):
  scale_in_place   data *= -1 over the whole buffer (values stay put)
  copy_and_scale   dst = src * 0.5
  copy             dst = src through the same kernel (scale 1)
  batched_in       --tensors tensors of random sizes (summing to the buffer)
                   packed into the fusion buffer with a prescale, one call
  batched_out      the fusion buffer unpacked into those tensors with a
                   postscale, one call

Prints each case's bandwidth and its ratio to memcpy; writes everything, with
the GPU model, to bench/results/gpu_kernels.json (or --output).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TARGET = 0.9


def fail(message):
    sys.exit(f"bench/gpu_kernels.py: {message}")


def load():
    """(cupy, mxplugin core) or exits saying what is missing."""
    try:
        import cupy
    except ImportError:
        fail("needs CuPy (pip install cupy-cuda12x or cupy-cuda13x) and a CUDA GPU")
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        fail(f"no CUDA device: {exc}")
    if devices == 0:
        fail("no CUDA device")
    from mxplugin._loader import core_module as core

    if not core.cuda_built():
        fail("mxplugin was built without CUDA: rebuild with nvcc on PATH or MXPLUGIN_WITH_CUDA=1")
    return cupy, core


def tensor_sizes(total, count, rng):
    """`count` random sizes summing to `total` (odd sizes; each tensor is then
    placed at the executors' aligned offset, see below)."""
    cuts = sorted(int(c) + 1 for c in rng.choice(total - 1, size=count - 1, replace=False))
    edges = [0] + cuts + [total]
    return [b - a for a, b in zip(edges, edges[1:])]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--tensors", type=int, default=161, help="tensors in the batched copies")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5, help="launches per timed sample")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                         "gpu_kernels.json"))
    args = parser.parse_args()
    if min(args.sizes_mb) < 64:
        fail("buffers of 64 MB and more only (smaller ones fit in L2 and measure the cache)")

    cp, core = load()
    import numpy as np

    stream = cp.cuda.Stream(non_blocking=True)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    rng = np.random.default_rng(0)
    results = {"gpu": gpu, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
               "driver": cp.cuda.runtime.driverGetVersion(), "iters": args.iters, "reps": args.reps,
               "target_ratio_to_memcpy": TARGET, "cases": []}
    print(f"{gpu}; medians of {args.iters} rounds x {args.reps} launches; GB/s = (bytes read + written) / time")

    for dtype in args.dtypes:
        np_dtype = np.dtype("uint16" if dtype == "bfloat16" else dtype)
        for size_mb in args.sizes_mb:
            n = size_mb * (1 << 20) // np_dtype.itemsize
            nbytes = n * np_dtype.itemsize
            src = cp.asarray(rng.standard_normal(n).astype(np.float32)).astype(np_dtype)
            dst = cp.empty_like(src)
            sizes = tensor_sizes(n, args.tensors, rng)
            tensors = [cp.ones(s, np_dtype) for s in sizes]
            item = np_dtype.itemsize
            # The executors' layout: each tensor at a multiple of the fusion
            # alignment (src/common/codes.h), not back to back.
            align = core.FUSION_ALIGNMENT_BYTES // item
            offsets, at = [], 0
            for size in sizes:
                offsets.append(at)
                at += (int(size) + align - 1) // align * align
            if at > n:  # padding: the buffer holds the aligned layout
                src = cp.concatenate([src, cp.zeros(at - n, np_dtype)])
            pack = [(src.data.ptr + int(o) * item, t.data.ptr, t.size, 0.5) for t, o in zip(tensors, offsets)]
            unpack = [(t.data.ptr, src.data.ptr + int(o) * item, t.size, 2.0) for t, o in zip(tensors, offsets)]
            s = stream.ptr
            cases = {
                "memcpy": lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, s),
                "cupy_copy": lambda: dst.__setitem__(Ellipsis, src),
                "scale_in_place": lambda: core.cuda_scale(src.data.ptr, n, dtype, -1.0, s),
                "copy_and_scale": lambda: core.cuda_copy_and_scale(dst.data.ptr, src.data.ptr, n, dtype, 0.5, s),
                "copy": lambda: core.cuda_copy_and_scale(dst.data.ptr, src.data.ptr, n, dtype, 1.0, s),
                "batched_in": lambda: core.cuda_batched_copy(pack, dtype, s),
                "batched_out": lambda: core.cuda_batched_copy(unpack, dtype, s),
            }
            cp.cuda.Device().synchronize()
            times = {name: [] for name in cases}
            with stream:  # CuPy's own copy goes to the same stream
                for it in range(args.warmup + args.iters):
                    for name, fn in cases.items():
                        start, stop = cp.cuda.Event(), cp.cuda.Event()
                        start.record(stream)
                        for _ in range(args.reps):
                            fn()
                        stop.record(stream)
                        stop.synchronize()
                        if it >= args.warmup:
                            times[name].append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / args.reps)
            core.cuda_synchronize(s)
            medians = {name: statistics.median(t) for name, t in times.items()}
            bandwidth = {name: 2 * nbytes / t / 1e9 for name, t in medians.items()}
            print(f"\n{dtype}, {size_mb} MB:")
            for name in cases:
                ratio = bandwidth[name] / bandwidth["memcpy"]
                flag = "" if name in ("memcpy", "cupy_copy") or ratio >= TARGET else "  (below target)"
                print(f"  {name:15s} {bandwidth[name]:8.0f} GB/s  {medians[name] * 1e6:9.1f} us  "
                      f"{ratio:5.2f} x memcpy{flag}")
                results["cases"].append({"dtype": dtype, "size_mb": size_mb, "case": name,
                                         "median_s": medians[name], "gb_per_s": bandwidth[name],
                                         "ratio_to_memcpy": ratio})
            del src, dst, tensors
            cp.get_default_memory_pool().free_all_blocks()

    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
