"""GPU allreduce through mxplugin's core against one raw NCCL allreduce of the
same bytes, measured in the same run (needs CuPy, a GPU per rank and a build
with NCCL; no MXNet):

    mxplugin-run -np 2 python bench/gpu_allreduce.py [--model resnet50] [--iters 20]

Each rank takes GPU local_rank. Cases, each timed end to end from the host
(enqueue to every handle done), medians of --iters after --warmup:
  reference     one ncclAllReduce (CuPy's NCCL binding) of a single buffer
                holding all the gradients' bytes, then a stream synchronise
  grouped       one grouped call of every gradient tensor (fused on the GPU,
                averaged: prescale/postscale folded into the pack/unpack)
  per_tensor    one call per tensor, then waiting for all of them
Prints each case's time and its ratio to the reference; rank 0 writes
everything, with the GPU model and MXPLUGIN_NUM_STREAMS, to
bench/results/gpu_allreduce.json (or --output).
"""
import os
import sys

import numpy as np

from harness import arguments, interleave, medians, spread, timed, write_result

# float32 element counts of a ResNet50-like gradient list: 109 tensors,
# 25.5 M elements (102 MB), from 1000 to 2.4 M elements each. (The CPU
# benchmark takes resnet50_v1's exact list from MXNet, which the GPU test
# machine does not have.)
RESNET50_SHAPES = ([9408, 64, 64] + [4096, 64, 36864, 64, 16384, 256, 16384, 256] +
                   [16384, 64, 36864, 64, 16384, 256] * 2 + [32768, 128, 147456, 128, 65536, 512, 131072, 512] +
                   [65536, 128, 147456, 128, 65536, 512] * 3 +
                   [131072, 256, 589824, 256, 262144, 1024, 524288, 1024] +
                   [262144, 256, 589824, 256, 262144, 1024] * 5 +
                   [524288, 512, 2359296, 512, 1048576, 2048, 2097152, 2048] +
                   [1048576, 512, 2359296, 512, 1048576, 2048] * 2 + [2048000, 1000])


def fail(message):
    sys.exit(f"bench/gpu_allreduce.py: {message}")


def main():
    args = arguments(__doc__, iters=20, warmup=5, output="gpu_allreduce.json").parse_args()
    try:
        import cupy as cp
        from cupy.cuda import nccl
    except ImportError:
        fail("needs CuPy with NCCL support (pip install cupy-cuda12x or cupy-cuda13x)")
    from mxplugin._loader import core_module as m
    if not m.nccl_built():
        fail("this build of mxplugin has no NCCL (mxplugin-run --check-build says why)")

    core = m.Core()
    topo = core.topology()
    rank, size = topo["rank"], topo["size"]
    cp.cuda.Device(topo["local_rank"]).use()
    dev = topo["local_rank"]
    stream = cp.cuda.Stream(non_blocking=True)

    # Reference communicator: its id travels over mxplugin's CPU broadcast.
    # get_unique_id() returns a tuple of ints in CuPy 13 and bytes in CuPy 14.
    raw_id = nccl.get_unique_id() if rank == 0 else bytes(128)
    uid = (np.frombuffer(raw_id, dtype=np.int8).copy() if isinstance(raw_id, (bytes, bytearray))
           else np.array(raw_id, dtype=np.int8))
    h = core.enqueue([m.Op("bench.nccl_id", m.OP_BROADCAST, m.DTYPES["int8"], [uid.size], uid.ctypes.data,
                           uid.ctypes.data)], 0)
    h.wait()
    try:  # CuPy 14 takes the id as bytes, CuPy 13 as a tuple of ints
        raw = nccl.NcclCommunicator(size, uid.tobytes(), rank)
    except TypeError:
        raw = nccl.NcclCommunicator(size, tuple(int(b) for b in uid), rank)

    grads = [cp.ones(n, dtype=cp.float32) for n in RESNET50_SHAPES]
    total = sum(RESNET50_SHAPES)
    flat = cp.ones(total, dtype=cp.float32)
    stream.synchronize()

    def op(name, g):
        return m.Op(name, m.OP_ALLREDUCE, m.DTYPES["float32"], [g.size], g.data.ptr, g.data.ptr,
                    reduce_op=m.REDUCE_AVERAGE, device=dev, stream=stream.ptr)

    def reference():
        raw.allReduce(flat.data.ptr, flat.data.ptr, total, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()

    def grouped():
        core.enqueue([op(f"g{i}", g) for i, g in enumerate(grads)], 0).wait()

    def per_tensor():
        handles = [core.enqueue([op(f"t{i}", g)], 0) for i, g in enumerate(grads)]
        for handle in handles:
            handle.wait()

    cases = {"reference": reference, "grouped": grouped, "per_tensor": per_tensor}
    times = interleave({name: timed(fn) for name, fn in cases.items()}, args.iters, args.warmup)
    med = medians(times)
    result = {
        "gpu": cp.cuda.runtime.getDeviceProperties(dev)["name"].decode(), "ranks": size,
        "num_streams": int(os.environ.get("MXPLUGIN_NUM_STREAMS", "2")), "tensors": len(grads),
        "bytes": total * 4, "median_seconds": med, "spread_seconds": spread(times), "samples": times,
        "ratio_to_reference": {k: med[k] / med["reference"] for k in med},
    }
    if rank == 0:
        print(f"{result['gpu']}, {size} rank(s), {len(grads)} tensors, {total * 4 / 1e6:.1f} MB, "
              f"MXPLUGIN_NUM_STREAMS={result['num_streams']}")
        for k in cases:
            print(f"  {k:11s} {med[k] * 1e3:8.2f} ms   ratio to one raw ncclAllReduce {med[k] / med['reference']:.3f}")
        write_result(args.output, result)
    core.shutdown()


if __name__ == "__main__":
    main()
