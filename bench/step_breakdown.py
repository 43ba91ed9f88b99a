"""Where a training step's time goes: forward+backward, the wait for the
slowest rank's backward (mean over ranks), communication (gradient
allreduce) and update, for DistributedTrainer on hybridized resnet50_v1
(SGD momentum). Each phase is timed with waitall() around it, so
the phases do not overlap here (in normal training communication overlaps
with backward).

    python bench/step_breakdown.py                  # 1 rank
    mxplugin-run -np 2 python bench/step_breakdown.py
Writes bench/results/step_breakdown_<N>ranks.json.
"""
import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from harness import arguments, interleave, medians, spread, timed, write_result

# after harness, which puts this checkout on the path where no mxplugin is installed
import mxplugin as hvd
from trainer import SGD, resnet


def main():
    p = arguments(__doc__, steps=8, warmup=(2, "warm-up steps"))
    p.add_argument("--batch-size", type=int, default=8, help="batch per rank (default 8)")
    p.add_argument("--image-size", type=int, default=112, help="image side (default 112)")
    args = p.parse_args()
    hvd.init()
    net = resnet(True, args.image_size)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(args.batch_size, 3, args.image_size, args.image_size))
    y = mx.nd.array(np.arange(args.batch_size) % 1000)

    def fwd_bwd():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()

    def phase(fn, first=False):
        """One phase, nothing else running: waitall on both sides; a step
        starts from a barrier."""
        def before():
            if first:
                hvd.barrier()
            mx.nd.waitall()
        return timed(fn, before=before, wait=mx.nd.waitall)

    # The phases of one step in turn, step after step. A synchronous
    # exchange starts once the slowest rank's backward is done: that wait is
    # a phase of its own (a barrier), so communication times the exchange alone.
    phases = interleave({"forward_backward": phase(fwd_bwd, first=True),
                         "slowest_rank_wait": phase(hvd.barrier),
                         "communication": phase(trainer.allreduce_grads),
                         "update": phase(lambda: trainer.update(args.batch_size))}, args.steps, args.warmup)
    # Each rank waits as long as it is faster: the mean over ranks of a
    # step's wait is what the job loses to it per step.
    every = hvd.allgather_object(phases["slowest_rank_wait"], name="breakdown.waits")
    phases["slowest_rank_wait"] = [sum(step) / len(step) for step in zip(*every)]
    med = medians(phases)
    if hvd.rank() == 0:
        total = sum(med.values())
        print(f"resnet50_v1, batch {args.batch_size}/rank, {args.image_size}px, {hvd.size()} ranks (median ms):")
        for k, v in med.items():
            print(f"  {k:17s} {v * 1e3:8.1f}  ({v / total:.1%})")
        write_result(f"step_breakdown_{hvd.size()}ranks.json",
                     {"ranks": hvd.size(), "batch_per_rank": args.batch_size, "image": args.image_size,
                      "times_s": phases, "median_s": med, "spread_s": spread(phases)})
    hvd.shutdown()


if __name__ == "__main__":
    main()
