"""Trainer benchmarks.

    python bench/trainer.py update             # 1 process: step() cost
    mxplugin-run -np 2 python bench/trainer.py scaling
    OMP_NUM_THREADS=2 python bench/trainer.py single --batch-size 16 --tag 2threads

update: DistributedTrainer.step (size 1) against gluon.Trainer.step on
  resnet50_v1's parameters (SGD, momentum 0.9, wd 1e-4), interleaved, plus the
  memory-bandwidth floor: bytes the update must move / measured streaming
  bandwidth of an in-place `a += b`.
scaling: hybridized resnet50_v1, batch 8 per rank, 3x112x112, SGD momentum.
  Interleaved rounds of (a) rank 0 alone with gluon.Trainer (the 1-process
  reference; the other rank idles), (b) every rank with DistributedTrainer,
  (c) every rank with a per-tensor allreduce_ loop then gluon's update,
  (d) every rank with a DistributedTrainer of its own (a process set of
  that rank alone: the same fused update, no exchange between ranks), the
  machine's own ceiling: what N processes sharing its memory and caches get.
  Reports images/s, scaling efficiency, the ceiling, and the time of
  allreduce + update.
  Every rank runs with OMP_NUM_THREADS=1 (the launcher's default for 2 ranks
  on 2 cores), so the efficiency is per rank: N ranks of 1 thread against 1
  process of 1 thread.
single: one process alone with gluon.Trainer, the same hybridized model,
  with the threads it is given (OMP_NUM_THREADS): the user's alternative to
  mxplugin-run -np N on one machine is one process using every core on the
  global batch. run_all.py runs it before and after the scaling run.
Results go to bench/results/trainer_<mode>[_<tag>].json.
"""
import os
import statistics
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from harness import arguments, interleave, medians, spread, timed, write_result

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd

SGD = {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4}


def resnet(hybridize=False, image=224):
    from mxnet.gluon.model_zoo import vision

    net = vision.resnet50_v1()
    net.initialize(mx.init.Xavier())
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    net(mx.nd.zeros((1, 3, image, image)))
    return net


def stream_bandwidth(nbytes):
    """Bytes per second of an in-place streaming pass, `a += b` (reads a and b,
    writes a), median of 5: the access pattern of an in-place update, without
    the hidden destination read a copy into another buffer pays."""
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.ones_like(a)
    times = interleave({"add": timed(lambda: np.add(a, b, out=a))}, 5)["add"]
    return 3 * nbytes / statistics.median(times)


def fill_grads(params):
    for p in params.values():
        if p.grad_req != "null":
            p.grad()[:] = 1e-3
            p.data()._fresh_grad = True
    mx.nd.waitall()


def bench_update(iters, warmup):
    hvd.init()
    ref_net, net, multi_net = resnet(), resnet(), resnet()
    ref = gluon.Trainer(ref_net.collect_params(), "sgd", dict(SGD), kvstore=None)
    ours = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD))
    # The path GPU buckets take: MXNet's multi-tensor ops (multi_sgd_mom_update),
    # aggregated as gluon does, over the same bucket layout.
    multi = hvd.DistributedTrainer(multi_net.collect_params(), "sgd", dict(SGD), fused_update=False)
    n = sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null")
    moved = 5 * 4 * n  # read weight, grad, momentum; write weight, momentum

    def one_step(trainer, network):
        params = network.collect_params()
        return timed(lambda: trainer.step(1), before=lambda: fill_grads(params), wait=mx.nd.waitall)

    times = interleave({"gluon": one_step(ref, ref_net), "mxplugin": one_step(ours, net),
                        "mxnet_multi_ops": one_step(multi, multi_net)}, iters, warmup)
    bw = stream_bandwidth(4 * n)
    med = medians(times)
    floor = moved / bw
    result = {"values": n, "bytes_moved": moved, "stream_bandwidth_Bps": bw, "floor_s": floor,
              "times_s": times, "median_s": med, "spread_s": spread(times),
              "ratio_vs_gluon": med["mxplugin"] / med["gluon"],
              "gluon_vs_floor": med["gluon"] / floor, "mxplugin_vs_floor": med["mxplugin"] / floor,
              "mxnet_multi_ops_vs_floor": med["mxnet_multi_ops"] / floor,
              "aggregate_num": int(getattr(multi._optimizer, "aggregate_num", 0) or 0)}
    print(f"resnet50_v1 update, {n} values, SGD momentum + wd, 1 process")
    print(f"  gluon.Trainer.step        median {med['gluon'] * 1e3:8.2f} ms  ({result['gluon_vs_floor']:.2f}x floor)")
    print(f"  DistributedTrainer.step   median {med['mxplugin'] * 1e3:8.2f} ms  ({result['mxplugin_vs_floor']:.2f}x floor)"
          f"  ratio {result['ratio_vs_gluon']:.3f}")
    print(f"  same buckets, MXNet multi-tensor ops median {med['mxnet_multi_ops'] * 1e3:8.2f} ms  "
          f"({result['mxnet_multi_ops_vs_floor']:.2f}x floor)")
    print(f"  bandwidth floor           {floor * 1e3:8.2f} ms  ({moved / 1e6:.0f} MB at {bw / 1e9:.1f} GB/s, a += b)")
    return result


def train_steps(net, step_fn, batch, steps, image, timings=None):
    x = mx.nd.random.uniform(shape=(batch, 3, image, image))
    y = mx.nd.array(np.arange(batch) % 1000)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mx.nd.waitall()
    start = time.perf_counter()
    for _ in range(steps):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        if timings is not None:
            mx.nd.waitall()
            hvd.barrier()  # time the step alone, not the other rank finishing its backward
            t = time.perf_counter()
        step_fn(batch)
        if timings is not None:
            mx.nd.waitall()
            timings.append(time.perf_counter() - t)
    mx.nd.waitall()
    return batch * steps / (time.perf_counter() - start)


def bench_scaling(rounds, steps, batch, image):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    ref_net, net, loop_net = resnet(True, image), resnet(True, image), resnet(True, image)
    ref = gluon.Trainer(ref_net.collect_params(), "sgd", dict(SGD), kvstore=None)
    ours = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD))
    loop = gluon.Trainer(loop_net.collect_params(), "sgd", dict(SGD), kvstore=None)
    loop_grads = [p for p in loop_net.collect_params().values() if p.grad_req != "null"]
    later_net = resnet(True, image)
    later = hvd.DistributedTrainer(later_net.collect_params(), "sgd", dict(SGD))

    def after_backward(b):  # the exchange only once backward has finished: no overlap
        mx.nd.waitall()
        later.step(b)
    own_set = [hvd.add_process_set([r]) for r in range(size)][rank]
    alone_net = resnet(True, image)
    alone = hvd.DistributedTrainer(alone_net.collect_params(), "sgd", dict(SGD), process_set=own_set)

    def per_tensor_step(b):
        for i, p in enumerate(loop_grads):
            hvd.allreduce_(p.grad(), name=f"loop.{i}", priority=-i)
        loop.step(b)

    def single():
        hvd.barrier()
        return train_steps(ref_net, ref.step, batch, steps, image) if rank == 0 else None  # one process alone

    def every_rank(network, step_fn):
        """images/s of all ranks over `steps` steps, and the times of the
        step() call (allreduce + update) of 2 more."""
        def run():
            hvd.barrier()
            images = train_steps(network, step_fn, batch, steps, image) * size
            calls = []
            train_steps(network, step_fn, batch, 2, image, calls)
            return images, calls
        return run

    samples = interleave({"single": single, "mxplugin": every_rank(net, ours.step),
                          "per_tensor": every_rank(loop_net, per_tensor_step),
                          "after_backward": every_rank(later_net, after_backward),
                          "independent": every_rank(alone_net, alone.step)}, rounds, warmup=1,
                         rotate=True)
    if rank != 0:
        return None
    distributed = ("mxplugin", "per_tensor", "after_backward", "independent")
    out = {"single": samples["single"], **{k: [images for images, _ in samples[k]] for k in distributed}}
    comm = {k: [t for _, calls in samples[k] for t in calls] for k in distributed}
    med, cmed = medians(out), medians(comm)
    result = {"ranks": size, "batch_per_rank": batch, "image": image, "images_per_s": out,
              "median_images_per_s": med, "spread_images_per_s": spread(out), "allreduce_update_s": comm, "median_allreduce_update_s": cmed,
              "scaling_efficiency": med["mxplugin"] / (size * med["single"]),
              "scaling_efficiency_per_tensor": med["per_tensor"] / (size * med["single"]),
              "scaling_efficiency_after_backward": med["after_backward"] / (size * med["single"]),
              "scaling_ceiling": med["independent"] / (size * med["single"]),
              "efficiency_against_ceiling": med["mxplugin"] / med["independent"],
              "allreduce_update_ratio": cmed["mxplugin"] / cmed["per_tensor"]}
    print(f"resnet50_v1 hybridized, batch {batch}/rank, 3x{image}x{image}, SGD momentum, {size} ranks")
    print(f"  1 process gluon.Trainer        {med['single']:8.1f} img/s")
    print(f"  {size} ranks DistributedTrainer     {med['mxplugin']:8.1f} img/s total"
          f"  scaling efficiency {result['scaling_efficiency']:.3f}")
    print(f"  {size} ranks allreduce_ loop+gluon  {med['per_tensor']:8.1f} img/s total"
          f"  scaling efficiency {result['scaling_efficiency_per_tensor']:.3f}")
    print(f"  {size} ranks, exchange after backward {med['after_backward']:8.1f} img/s total"
          f"  scaling efficiency {result['scaling_efficiency_after_backward']:.3f}")
    print(f"  {size} ranks alone, no exchange     {med['independent']:8.1f} img/s total"
          f"  ceiling {result['scaling_ceiling']:.3f}")
    print(f"  allreduce + update: mxplugin {cmed['mxplugin'] * 1e3:.1f} ms, per-tensor loop + gluon "
          f"{cmed['per_tensor'] * 1e3:.1f} ms, ratio {result['allreduce_update_ratio']:.3f}")
    return result


def bench_single(rounds, steps, batch, image):
    """One process, gluon.Trainer, the threads OMP_NUM_THREADS gives it."""
    net = resnet(True, image)
    trainer = gluon.Trainer(net.collect_params(), "sgd", dict(SGD), kvstore=None)
    rates = interleave({"single": lambda: train_steps(net, trainer.step, batch, steps, image)}, rounds, 1)["single"]
    threads = int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count()
    result = {"threads": threads, "batch": batch, "image": image, "images_per_s": rates,
              "median_images_per_s": statistics.median(rates)}
    print(f"resnet50_v1 hybridized, 1 process, {threads} thread(s), batch {batch}: "
          f"{result['median_images_per_s']:.1f} img/s (median of {rounds})")
    return result


def main():
    p = arguments(__doc__, iters=(10, "update: measured iterations"), warmup=(3, "update: warm-up iterations"),
                  rounds=(3, "scaling, single: measured rounds"),
                  steps=(5, "scaling, single: training steps per round"))
    p.add_argument("mode", choices=["update", "scaling", "single"])
    p.add_argument("--batch-size", type=int, default=8, help="scaling: batch per rank; single: batch (default 8)")
    p.add_argument("--image-size", type=int, default=112, help="scaling: image side (default 112)")
    p.add_argument("--tag", default="", help="suffix of the result file (trainer_<mode>_<tag>.json)")
    p.add_argument("--output", default=None, help="the result file, in place of trainer_<mode>[_<tag>].json")
    args = p.parse_args()
    if args.mode == "update":
        result = bench_update(args.iters, args.warmup)
    elif args.mode == "scaling":
        result = bench_scaling(args.rounds, args.steps, args.batch_size, args.image_size)
    else:
        hvd.init()
        result = bench_single(args.rounds, args.steps, args.batch_size, args.image_size)
    if result is not None:
        write_result(args.output or f"trainer_{args.mode}{'_' + args.tag if args.tag else ''}.json", result)
    hvd.shutdown()


if __name__ == "__main__":
    main()
