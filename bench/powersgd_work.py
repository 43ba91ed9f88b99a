"""PowerSGD's own work on one thread against its floor: the reduction of
resnet50_v1's compressed gradients (the 54 matrices PowerSGD takes at its
defaults at rank 4; the same ones at every rank) in a world of one rank, so that the allreduces cost next to
nothing and what is timed is compression, orthogonalisation, the error
update and decompression:

    python bench/powersgd_work.py        # writes bench/results/powersgd_work.json

At each rank r of 1, 2, 4, 8, interleaved and medians of --iters:
- "core": the trainer's reduction as it runs (the core's passes),
- "mxnet_ops": the same reduction through MXNet's operators (dot, gemm,
  elementwise adds: the path before the core's passes, still used on GPUs
  and for float16/float64 gradients),
- the floor: the larger of the bytes floor and the products floor. Bytes:
  the method must read the gradient and the error buffer and write the
  error (E += G), read and write the error again once P is known, and
  write the gradient (24 bytes per value), at the bandwidth of an in-place
  add (x += y, 12 bytes per value) measured in this run, as the fused
  update's floor is (bench/fused_kernels.py). Products: 6r multiply-adds
  per value (P = Q A^T, Q = P^ A, E -= P^^T Q, G = P^^T Q: r each, the
  residual's two counted, the rest one), at the rate of a single-threaded
  float32 matrix product (NumPy's BLAS, 1024 x 1024) in this run.
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS are 1."""
import json
import os

os.environ["OMP_NUM_THREADS"] = "1"  # before MXNet and NumPy start their thread pools
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

from harness import arguments, interleave, medians, timed, write_result  # noqa: E402

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd  # noqa: E402
from mxplugin.training.powersgd import Factors, PowerSGDReducer  # noqa: E402

from allreduce import resnet50_shapes  # noqa: E402

RANKS = (1, 2, 4, 8)
ITERATIONS = 9
BYTES_PER_VALUE = 24
GEMM_SIZE = 1024


def reduction(config, grads, in_core):
    """A way that times one reduction of `grads`, through the core's passes
    or through MXNet's operators."""
    reducer = PowerSGDReducer(config, f"work{config.rank}{'core' if in_core else 'ops'}.")
    entries = list(enumerate(grads))
    keep = Factors.runs_in_core

    def run():
        Factors.runs_in_core = keep if in_core else (lambda self, grad: False)
        try:
            reducer.reduce(entries, hvd.global_process_set)
            mx.nd.waitall()
        finally:
            Factors.runs_in_core = keep
    return timed(run)


def main():
    args = arguments(__doc__, iters=(ITERATIONS, "measured rounds")).parse_args()
    hvd.init()
    shapes = [s for s in resnet50_shapes() if hvd.Compression.powersgd(rank=4).matrix_shape(s)]
    values = sum(int(np.prod(s)) for s in shapes)
    rng = np.random.RandomState(0)
    grads = {way: [mx.nd.array(rng.standard_normal(s) * 1e-3) for s in shapes] for way in ("core", "mxnet_ops")}
    x, y = np.zeros(values, np.float32), np.ones(values, np.float32)
    a, b = (np.asarray(rng.standard_normal((GEMM_SIZE, GEMM_SIZE)), np.float32) for _ in range(2))
    ways = {"numpy.add(out=x)": timed(lambda: np.add(x, y, out=x)), "numpy.matmul": timed(lambda: a @ b)}
    for r in RANKS:
        config = hvd.Compression.powersgd(rank=r)
        for way in ("core", "mxnet_ops"):
            ways[f"{way} rank {r}"] = reduction(config, grads[way], way == "core")
    mx.nd.waitall()
    med = medians(interleave(ways, args.iters, warmup=2, rotate=True))
    add_bw = 12 * values / med["numpy.add(out=x)"]
    fma_rate = GEMM_SIZE ** 3 / med["numpy.matmul"]
    result = {"values": values, "matrices": len(shapes), "omp_num_threads": 1, "inplace_add_GBps": add_bw / 1e9,
              "gemm_gfma_per_s": fma_rate / 1e9, "median_s": med, "ranks": {}}
    for r in RANKS:
        bytes_floor = BYTES_PER_VALUE * values / add_bw
        products_floor = 6 * r * values / fma_rate
        floor = max(bytes_floor, products_floor)
        core, ops = med[f"core rank {r}"], med[f"mxnet_ops rank {r}"]
        result["ranks"][r] = {"core_s": core, "mxnet_ops_s": ops, "bytes_floor_s": bytes_floor,
                              "products_floor_s": products_floor, "floor_s": floor,
                              "core_vs_floor": core / floor, "mxnet_ops_vs_floor": ops / floor}
    print(json.dumps(result, indent=1))
    write_result("powersgd_work.json", result)
    hvd.shutdown()


if __name__ == "__main__":
    main()
