"""PowerSGD on resnet50_v1's gradient set: bytes one rank sends into the
allreduces per step (counted from the factors' and the uncompressed
tensors' sizes, float32; not link counters) at rank 1, 2, 4, 8, and the time
of the gradient exchange (compress + allreduces + decompress) against the
uncompressed grouped allreduce of the same gradients, on one host:

    mpiexec -n 2 python bench/powersgd.py      # writes bench/results/powersgd.json

Times are medians over interleaved iterations on this machine (its cores
shared by the ranks); times_s[r] is [uncompressed, PowerSGD at rank r], the
uncompressed figure the same for every r. Across fake hosts, with the bytes
counted on the links: bench/powersgd_hosts.py."""
import json
import time

import mxnet as mx
import numpy as np

from harness import arguments, interleave, medians, write_result

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd
from mxplugin.training.powersgd import PowerSGDReducer

from allreduce import resnet50_shapes

RANKS = (1, 2, 4, 8)
TIMED_RANKS = (1, 4)
ITERATIONS = 7


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


def exchange_samples(grads, shapes, ranks, iterations, warmup=2, sent_so_far=None, other_work=None):
    """Interleaved exchanges of `grads`: each iteration times the
    uncompressed grouped allreduce ('uncompressed') and, for each PowerSGD
    rank r (key r), the compressed exchange (the compressed tensors' P and Q
    allreduces with the products around them, then the other tensors'
    grouped allreduce). Returns {method: [seconds per exchange]} and, with
    `sent_so_far` (a function: bytes this host sent so far), {method:
    [bytes sent during each exchange]} (None without), and with `other_work`
    (begin() before an exchange, cores() after it: bench/machine.py's
    OtherWork) {method: [cores other work kept busy meanwhile]} (None
    without). The exchanges replace `grads` by their sums over the ranks
    (the uncompressed one a copy of them), so the values grow from one
    iteration to the next, far from float32's limits: the time does not
    depend on them."""
    plain = [g.copy() for g in grads]
    exchanges = {"uncompressed": lambda: hvd.grouped_allreduce_(plain, name="plain", op=hvd.Sum)}
    for rank in ranks:
        config = hvd.Compression.powersgd(rank=rank)
        reducer = PowerSGDReducer(config, f"bench{rank}.")
        compressed = [(i, g) for i, (g, s) in enumerate(zip(grads, shapes)) if config.matrix_shape(s)]
        rest = [g for g, s in zip(grads, shapes) if not config.matrix_shape(s)]

        def exchange(reducer=reducer, compressed=compressed, rest=rest, rank=rank):
            reducer.reduce(compressed, hvd.global_process_set)
            hvd.grouped_allreduce_(rest, name=f"rest{rank}", op=hvd.Sum)
        exchanges[rank] = exchange

    def measured(exchange):
        """One exchange from a barrier: (seconds, bytes sent or None, other
        work's cores or None)."""
        def run():
            hvd.barrier()
            before = sent_so_far() if sent_so_far else 0
            if other_work:
                other_work.begin()
            start = time.perf_counter()
            exchange()
            mx.nd.waitall()
            seconds = time.perf_counter() - start
            cores = other_work.cores() if other_work else None
            hvd.barrier()  # every rank's sends have left before the counter is read
            return seconds, sent_so_far() - before if sent_so_far else None, cores
        return run

    mx.nd.waitall()
    samples = interleave({method: measured(exchange) for method, exchange in exchanges.items()}, iterations, warmup)

    def part(i):
        return {method: [sample[i] for sample in got] for method, got in samples.items()}
    return part(0), part(1) if sent_so_far else None, part(2) if other_work else None


def main():
    args = arguments(__doc__, iters=(ITERATIONS, "measured exchanges per method")).parse_args()
    hvd.init()
    shapes = resnet50_shapes()
    full = 4 * sum(int(np.prod(s)) for s in shapes)
    result = {"ranks": hvd.size(), "gradient_bytes": full, "sent_bytes": {}, "times_s": {}}
    for r in RANKS:
        result["sent_bytes"][r] = sent_bytes(shapes, r)
    rng = np.random.RandomState(hvd.rank())
    grads = [mx.nd.array(rng.standard_normal(s) * 1e-3) for s in shapes]
    med = medians(exchange_samples(grads, shapes, TIMED_RANKS, args.iters)[0])
    for r in TIMED_RANKS:
        result["times_s"][r] = [med["uncompressed"], med[r]]
    if hvd.rank() == 0:
        print(json.dumps(result, indent=1))
        write_result("powersgd.json", result)
    hvd.shutdown()


if __name__ == "__main__":
    main()
