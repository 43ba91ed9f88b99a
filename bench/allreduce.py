"""Allreduce benchmark (run on 2 ranks):

    mxplugin-run -np 2 python bench/allreduce.py

1. The resnet50_v1 gradient set (193 float32 tensors, 25,575,912 values)
   reduced with grouped_allreduce_ and with a per-tensor allreduce_ loop plus
   waitall (wall clock from the Python call to the data being ready), against
   one raw MPI_Allreduce in place on a single buffer of the same total size
   (timed around the MPI call alone, see bench/mpi_reference.py);
   interleaved, medians after warm-up; prints the ratios.
2. A curve over message sizes (4 KB .. 256 MB): one allreduce_ against raw MPI.
Writes everything to bench/results/allreduce.json (or --output).
"""
import mxnet as mx
import numpy as np

from harness import arguments, interleave, medians, spread, timed, write_result

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd
from mpi_reference import RawAllreduce


def resnet50_shapes():
    """The shapes of resnet50_v1's gradients (193 tensors)."""
    from mxnet.gluon.model_zoo import vision

    net = vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 224, 224)))
    return [p.shape for p in net.collect_params().values() if p.grad_req != "null"]


def resnet50_gradients():
    return [mx.nd.ones(s) for s in resnet50_shapes()]


def after_barrier(fn):
    """fn timed from a barrier: every rank starts the call together."""
    return timed(fn, before=hvd.barrier)


def run_gradient_set(raw, iters, warmup):
    grads = resnet50_gradients()
    total = sum(g.size for g in grads)
    flat = np.ones(total, dtype=np.float32)
    mx.nd.waitall()

    def raw_mpi():
        hvd.barrier()
        return raw(flat)

    def grouped():
        hvd.grouped_allreduce_(grads, name="resnet50", op=hvd.Sum)
        mx.nd.waitall()

    def per_tensor():
        for i, g in enumerate(grads):
            hvd.allreduce_(g, name=f"resnet50.{i}", op=hvd.Sum, priority=-i)
        mx.nd.waitall()

    times = interleave({"raw_mpi": raw_mpi, "grouped_allreduce_": after_barrier(grouped),
                        "per_tensor_allreduce_": after_barrier(per_tensor)}, iters, warmup)
    med = medians(times)
    return {"tensors": len(grads), "values": int(total), "bytes": int(total * 4), "times_s": times,
            "median_s": med, "spread_s": spread(times),
            "ratio_grouped": med["grouped_allreduce_"] / med["raw_mpi"],
            "ratio_per_tensor": med["per_tensor_allreduce_"] / med["raw_mpi"]}


def run_size_curve(raw, iters, warmup, max_bytes):
    rows = []
    size = 4 << 10
    while size <= max_bytes:
        n = size // 4
        buf = np.ones(n, dtype=np.float32)
        arr = mx.nd.ones((n,))
        mx.nd.waitall()
        reps = max(1, min(50, (8 << 20) // size))  # enough calls to time small messages

        def raw_many():
            hvd.barrier()
            return sum(raw(buf) for _ in range(reps)) / reps

        def mxp_many():
            for _ in range(reps):
                hvd.allreduce_(arr, name=f"curve.{size}", op=hvd.Sum)
                arr.wait_to_read()

        clock = after_barrier(mxp_many)
        times = interleave({"raw_mpi": raw_many, "mxplugin": lambda: clock() / reps}, iters, warmup)
        med = medians(times)
        r, m = med["raw_mpi"], med["mxplugin"]
        rows.append({"bytes": size, "raw_mpi_s": r, "mxplugin_s": m, "ratio": m / r,
                     "raw_mpi_GBps": size / r / 1e9, "mxplugin_GBps": size / m / 1e9})
        size *= 4
    return rows


def main():
    p = arguments(__doc__, iters=10, warmup=3, output="allreduce.json")
    p.add_argument("--curve-max-bytes", type=int, default=256 << 20, help="largest message of the curve")
    p.add_argument("--no-curve", action="store_true", help="skip the message-size curve")
    args = p.parse_args()
    hvd.init()
    raw = RawAllreduce()
    result = {"ranks": hvd.size(), "gradient_set": run_gradient_set(raw, args.iters, args.warmup)}
    g = result["gradient_set"]
    if hvd.rank() == 0:
        med = g["median_s"]
        print(f"resnet50_v1 gradients: {g['tensors']} tensors, {g['values']} float32 values, {hvd.size()} ranks")
        print(f"  in-process data plane (one buffer) median {med['raw_mpi'] * 1e3:8.2f} ms")
        print(f"  grouped_allreduce_              median {med['grouped_allreduce_'] * 1e3:8.2f} ms"
              f"   ratio {g['ratio_grouped']:.3f}")
        print(f"  per-tensor allreduce_ + waitall median {med['per_tensor_allreduce_'] * 1e3:8.2f} ms"
              f"   ratio {g['ratio_per_tensor']:.3f}")
    if not args.no_curve:
        result["curve"] = run_size_curve(raw, max(3, args.iters // 2), 1, args.curve_max_bytes)
        if hvd.rank() == 0:
            print("message size curve (median per call):")
            for row in result["curve"]:
                print(f"  {row['bytes']:>11d} B  raw {row['raw_mpi_s'] * 1e6:10.1f} us  "
                      f"mxplugin {row['mxplugin_s'] * 1e6:10.1f} us  ratio {row['ratio']:.2f}")
    if hvd.rank() == 0:
        write_result(args.output, result)
    hvd.shutdown()


if __name__ == "__main__":
    main()
