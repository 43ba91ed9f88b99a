"""Where a training step's time goes: forward+backward, communication
(gradient allreduce) and update, for DistributedTrainer on hybridized
resnet50_v1 (SGD momentum). Each phase is timed with waitall() around it, so
the phases do not overlap here (in normal training communication overlaps
with backward).

    python bench/step_breakdown.py                  # 1 rank
    mxplugin-run -np 2 python bench/step_breakdown.py
Writes bench/results/step_breakdown_<N>ranks.json.
"""
import argparse
import json
import os
import statistics
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mxplugin as hvd  # noqa: E402
from bench.trainer import RESULTS, SGD, resnet  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=8, help="measured steps (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps (default 2)")
    p.add_argument("--batch-size", type=int, default=8, help="batch per rank (default 8)")
    p.add_argument("--image-size", type=int, default=112, help="image side (default 112)")
    args = p.parse_args()
    hvd.init()
    net = resnet(True, args.image_size)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(args.batch_size, 3, args.image_size, args.image_size))
    y = mx.nd.array(np.arange(args.batch_size) % 1000)
    phases = {"forward_backward": [], "communication": [], "update": []}

    def timed(fn):
        mx.nd.waitall()
        t = time.perf_counter()
        fn()
        mx.nd.waitall()
        return time.perf_counter() - t

    def fwd_bwd():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()

    for step in range(args.warmup + args.steps):
        hvd.barrier()
        f = timed(fwd_bwd)
        c = timed(trainer.allreduce_grads)
        u = timed(lambda: trainer.update(args.batch_size))
        if step >= args.warmup:
            phases["forward_backward"].append(f)
            phases["communication"].append(c)
            phases["update"].append(u)
    med = {k: statistics.median(v) for k, v in phases.items()}
    if hvd.rank() == 0:
        total = sum(med.values())
        print(f"resnet50_v1, batch {args.batch_size}/rank, {args.image_size}px, {hvd.size()} ranks (median ms):")
        for k, v in med.items():
            print(f"  {k:17s} {v * 1e3:8.1f}  ({v / total:.1%})")
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"step_breakdown_{hvd.size()}ranks.json")
        with open(path, "w") as f:
            json.dump({"ranks": hvd.size(), "batch_per_rank": args.batch_size, "image": args.image_size,
                       "times_s": phases, "median_s": med}, f, indent=1)
        print(f"wrote {path}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
