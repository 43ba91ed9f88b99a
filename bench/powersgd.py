"""PowerSGD on resnet50_v1's gradient set: bytes one rank sends into the
allreduces per step (counted from the factors' and the uncompressed
tensors' sizes, float32; not link counters) at rank 1, 2, 4, 8, and the time
of the gradient exchange (compress + allreduces + decompress) against the
uncompressed grouped allreduce of the same gradients, on one host:

    mpiexec -n 2 python bench/powersgd.py      # writes bench/results/powersgd.json

Times are medians over interleaved iterations on this machine (its cores
shared by the ranks); across hosts see README: not measured yet."""
import json
import os
import statistics
import sys
import time

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import mxplugin as hvd  # noqa: E402
from mxplugin.powersgd import PowerSGDReducer  # noqa: E402

RANKS = (1, 2, 4, 8)
TIMED_RANKS = (1, 4)
ITERATIONS = 7


def resnet50_shapes():
    net = mx.gluon.model_zoo.vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    return [p.shape for p in net.collect_params().values() if p.grad_req != "null"]


def sent_bytes(shapes, rank):
    config = hvd.Compression.powersgd(rank=rank)
    total = 0
    for shape in shapes:
        matrix = config.matrix_shape(shape)
        if matrix is None:
            total += int(np.prod(shape))
        else:
            rows, cols = sorted(matrix)
            total += min(rank, rows) * (rows + cols)
    return 4 * total


def exchange_seconds(grads, shapes, rank):
    """(uncompressed, PowerSGD) seconds of one exchange of `grads`."""
    config = hvd.Compression.powersgd(rank=rank)
    reducer = PowerSGDReducer(config, f"bench{rank}.")
    compressed = [(i, g) for i, (g, s) in enumerate(zip(grads, shapes)) if config.matrix_shape(s)]
    rest = [g for g, s in zip(grads, shapes) if not config.matrix_shape(s)]
    plain, low = [], []
    for it in range(ITERATIONS + 2):
        hvd.barrier()
        start = time.perf_counter()
        hvd.grouped_allreduce_(grads, name="plain", op=hvd.Sum)
        mx.nd.waitall()
        if it >= 2:
            plain.append(time.perf_counter() - start)
        hvd.barrier()
        start = time.perf_counter()
        reducer.reduce(compressed, hvd.global_process_set)
        hvd.grouped_allreduce_(rest, name=f"rest{rank}", op=hvd.Sum)
        mx.nd.waitall()
        if it >= 2:
            low.append(time.perf_counter() - start)
    return statistics.median(plain), statistics.median(low)


def main():
    hvd.init()
    shapes = resnet50_shapes()
    full = 4 * sum(int(np.prod(s)) for s in shapes)
    result = {"ranks": hvd.size(), "gradient_bytes": full, "sent_bytes": {}, "times_s": {}}
    for r in RANKS:
        result["sent_bytes"][r] = sent_bytes(shapes, r)
    rng = np.random.RandomState(hvd.rank())
    grads = [mx.nd.array(rng.standard_normal(s) * 1e-3) for s in shapes]
    for r in TIMED_RANKS:
        result["times_s"][r] = exchange_seconds(grads, shapes, r)
    if hvd.rank() == 0:
        print(json.dumps(result, indent=1))
        with open(os.path.join(HERE, "results", "powersgd.json"), "w") as f:
            json.dump(result, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
