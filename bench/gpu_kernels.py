"""CUDA scale and batched-copy kernel benchmark (needs a GPU, CuPy and a
CUDA build of mxplugin):

    python bench/gpu_kernels.py [--sizes-mb 64 256 1024] [--dtypes float32 float16]

For each buffer size (64 MB and up: past the L2 cache) and dtype, on one
stream, timed with CUDA events: medians of --iters interleaved rounds after
--warmup rounds, each round timing every case once (--reps launches each,
queued behind a 5 ms spin kernel so that the events time the GPU's work and
not the host's enqueueing; the host's time per call is printed beside it).
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
import sys

from harness import arguments, interleave, medians, write_result

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


def kernel_cases(cp, core, dtype, n, tensors, rng, stream):
    """{case: a launch} on buffers of n values of `dtype` made here (freed
    with the cases), for the cases the docstring lists."""
    import numpy as np

    np_dtype = np.dtype("uint16" if dtype == "bfloat16" else dtype)
    item = np_dtype.itemsize
    nbytes = n * item
    src = cp.asarray(rng.standard_normal(n).astype(np.float32)).astype(np_dtype)
    dst = cp.empty_like(src)
    sizes = tensor_sizes(n, tensors, rng)
    parts = [cp.ones(s, np_dtype) for s in sizes]
    # The executors' layout: each tensor at a multiple of the fusion
    # alignment (src/common/codes.h), not back to back.
    align = core.FUSION_ALIGNMENT_BYTES // item
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += (int(size) + align - 1) // align * align
    if at > n:  # padding: the buffer holds the aligned layout
        src = cp.concatenate([src, cp.zeros(at - n, np_dtype)])
    pack = [(src.data.ptr + int(o) * item, t.data.ptr, t.size, 0.5) for t, o in zip(parts, offsets)]
    unpack = [(t.data.ptr, src.data.ptr + int(o) * item, t.size, 2.0) for t, o in zip(parts, offsets)]
    s = stream.ptr
    head = src[:n]  # the first n values, whatever padding follows

    def cupy_copy():
        with stream:
            dst[...] = head
    return {
        "memcpy": lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, s),
        "cupy_copy": cupy_copy,
        "scale_in_place": lambda: core.cuda_scale(src.data.ptr, n, dtype, -1.0, s),
        "copy_and_scale": lambda: core.cuda_copy_and_scale(dst.data.ptr, src.data.ptr, n, dtype, 0.5, s),
        "copy": lambda: core.cuda_copy_and_scale(dst.data.ptr, src.data.ptr, n, dtype, 1.0, s),
        "batched_in": lambda: core.cuda_batched_copy(pack, dtype, s),
        "batched_out": lambda: core.cuda_batched_copy(unpack, dtype, s),
    }


# Spins one thread for a number of GPU clock cycles.
GATE_SOURCE = r"""
extern "C" __global__ void gate(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
"""
GATE_SECONDS = 0.005


def make_gate(cp, stream):
    """A call that holds `stream` busy for GATE_SECONDS. Queued before the
    start event, it lets the host enqueue every timed launch while the GPU
    waits, so the events measure the kernels, not how fast Python enqueues
    them (the batched copies' descriptor lists cost the host tens of
    microseconds per call here; the executors build them in C++)."""
    kernel = cp.RawKernel(GATE_SOURCE, "gate")
    rate_khz = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["clockRate"]
    cycles = int(rate_khz * 1e3 * GATE_SECONDS)

    def gate():
        with stream:  # RawKernel launches on the current stream
            kernel((1,), (1,), (cp.int64(cycles),))
    return gate


def event_timed(cp, stream, fn, reps, gate, host_seconds):
    """A way returning seconds per launch of fn, timed with CUDA events
    around `reps` launches on `stream` queued behind `gate`; the host's
    enqueue time per launch goes to host_seconds (a list)."""
    import time

    def run():
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        gate()
        start.record(stream)
        began = time.perf_counter()
        for _ in range(reps):
            fn()
        host_seconds.append((time.perf_counter() - began) / reps)
        stop.record(stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3 / reps
    return run


def main():
    parser = arguments(__doc__, iters=15, warmup=3, output="gpu_kernels.json")
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16"])
    parser.add_argument("--tensors", type=int, default=161, help="tensors in the batched copies")
    parser.add_argument("--reps", type=int, default=5, help="launches per timed sample")
    args = parser.parse_args()
    if min(args.sizes_mb) < 64:
        fail("buffers of 64 MB and more only (smaller ones fit in L2 and measure the cache)")

    cp, core = load()
    import numpy as np

    stream = cp.cuda.Stream(non_blocking=True)
    gate = make_gate(cp, stream)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    gpu = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    rng = np.random.default_rng(0)
    results = {"gpu": gpu, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
               "driver": cp.cuda.runtime.driverGetVersion(), "iters": args.iters, "reps": args.reps,
               "target_ratio_to_memcpy": TARGET, "cases": []}
    print(f"{gpu}; medians of {args.iters} rounds x {args.reps} launches; GB/s = (bytes read + written) / time")

    for dtype in args.dtypes:
        item = np.dtype("uint16" if dtype == "bfloat16" else dtype).itemsize
        for size_mb in args.sizes_mb:
            n = size_mb * (1 << 20) // item
            nbytes = n * item
            cases = kernel_cases(cp, core, dtype, n, args.tensors, rng, stream)
            cp.cuda.Device().synchronize()
            host = {name: [] for name in cases}
            with stream:  # CuPy's own copy goes to the same stream
                times = interleave({name: event_timed(cp, stream, fn, args.reps, gate, host[name])
                                    for name, fn in cases.items()}, args.iters, args.warmup)
            core.cuda_synchronize(stream.ptr)
            median = medians(times)
            bandwidth = {name: 2 * nbytes / t / 1e9 for name, t in median.items()}
            print(f"\n{dtype}, {size_mb} MB:")
            for name in cases:
                ratio = bandwidth[name] / bandwidth["memcpy"]
                flag = "" if name in ("memcpy", "cupy_copy") or ratio >= TARGET else "  (below target)"
                host_s = sorted(host[name])[len(host[name]) // 2]
                print(f"  {name:15s} {bandwidth[name]:8.0f} GB/s  {median[name] * 1e6:9.1f} us  "
                      f"{ratio:5.2f} x memcpy  (host {host_s * 1e6:6.1f} us a call){flag}")
                results["cases"].append({"dtype": dtype, "size_mb": size_mb, "case": name,
                                         "median_s": median[name], "gb_per_s": bandwidth[name],
                                         "ratio_to_memcpy": ratio, "host_enqueue_s": host_s})
            del cases  # and with them this size's buffers
            cp.get_default_memory_pool().free_all_blocks()

    print()
    write_result(args.output, results)


if __name__ == "__main__":
    main()
