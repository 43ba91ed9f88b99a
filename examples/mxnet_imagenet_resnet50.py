"""Trains an ImageNet classifier (ResNet-50 v1 by default) with data-parallel
mxplugin: every rank reads its own shard of the data, gradients are averaged
across ranks by hvd.DistributedTrainer.

Synthetic data (random images and labels) unless --use-rec names RecordIO
files, so it runs anywhere as a throughput check:

    mxplugin-run -np 2 python examples/mxnet_imagenet_resnet50.py \\
        --batch-size 4 --image-size 64 --num-batches 6 --num-epochs 1

On ImageNet packed as RecordIO (e.g. with mxnet's tools/im2rec.py):

    mxplugin-run -np 8 -H a:4,b:4 python examples/mxnet_imagenet_resnet50.py \\
        --use-rec --rec-train /data/train.rec --rec-val /data/val.rec \\
        --warmup-epochs 5 --lr-mode cosine --save-frequency 5 --save-dir ckpt

Continue from the checkpoint written after epoch 10 with --resume 10.

Learning rate: --lr is the rate for 256 images; the run uses
lr * batch-size * ranks / 256. LearningRateSchedule computes it before every
batch from the epoch and batch index (linear warmup over --warmup-epochs, then
step decay or cosine annealing to 0 at --num-epochs), and the loop sets it
with trainer.set_learning_rate, so a resumed run continues the schedule from
its epoch. An epoch, for the schedule, is the batches that actually run in it
(after --num-batches).

Checkpoints: rank 0 writes <save-dir>/<model>-<epochs done>.params
(net.save_parameters) and .states (trainer.save_states: momentum and update
count). --resume loads both on every rank and broadcasts the parameters from
rank 0, so the save directory must be visible to all ranks.
"""
import argparse
import logging
import math
import os
import random
import re
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxplugin as hvd

LOG = logging.getLogger("imagenet")
IMAGENET_TRAIN_IMAGES = 1281167
IMAGENET_VAL_IMAGES = 50000
# ImageNet's per-channel mean and standard deviation, in 0-255 pixel units.
RGB_MEAN = (123.68, 116.779, 103.939)
RGB_STD = (58.393, 57.12, 57.375)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("data")
    d.add_argument("--use-rec", action="store_true",
                   help="train on RecordIO files (--rec-train, ...) instead of synthetic data (default off)")
    d.add_argument("--rec-train", metavar="FILE", help="training RecordIO file (.rec)")
    d.add_argument("--rec-train-idx", metavar="FILE",
                   help="index of --rec-train (default: the .rec path with .idx); needed to shard and shuffle")
    d.add_argument("--rec-val", metavar="FILE", help="validation RecordIO file (default: no validation)")
    d.add_argument("--rec-val-idx", metavar="FILE", help="index of --rec-val (default: the .rec path with .idx)")
    d.add_argument("--data-threads", type=int, default=4,
                   help="decoding/augmentation threads per rank for RecordIO data (default 4)")
    d.add_argument("--num-train-images", type=int, default=IMAGENET_TRAIN_IMAGES,
                   help="images per epoch with synthetic data (default %(default)d, ImageNet-1k's train set)")

    m = p.add_argument_group("model")
    m.add_argument("--model", default="resnet50_v1",
                   help="any mxnet.gluon.model_zoo.vision model name (default %(default)s)")
    m.add_argument("--num-classes", type=int, default=1000, help="output classes (default %(default)d)")
    m.add_argument("--image-size", type=int, default=224,
                   help="side of the square input images in pixels (default %(default)d)")
    m.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="float16 casts the network and uses SGD with float32 master weights "
                        "(multi_precision); meant for GPUs (default %(default)s)")
    m.add_argument("--hybridize", action="store_true",
                   help="hybridize the network (static_alloc, static_shape) for speed (default off)")

    t = p.add_argument_group("training")
    t.add_argument("--batch-size", type=int, default=32, help="images per rank per step (default %(default)d)")
    t.add_argument("--num-epochs", type=int, default=90, help="epochs to train (default %(default)d)")
    t.add_argument("--num-batches", type=int, default=0,
                   help="stop each epoch (and each validation) after this many batches, for smoke "
                        "runs; 0 means the whole data set (default %(default)d)")
    t.add_argument("--lr", type=float, default=0.1,
                   help="base learning rate for a global batch of 256 images; the rate used is "
                        "lr * batch-size * ranks / 256 (default %(default)s)")
    t.add_argument("--lr-mode", choices=("step", "cosine"), default="step",
                   help="decay after warmup: step (multiply by --lr-decay at each --lr-decay-epoch) or "
                        "cosine (to 0 at --num-epochs) (default %(default)s)")
    t.add_argument("--lr-decay-epoch", default="30,60,80",
                   help="comma-separated epochs at which step mode decays the rate (default %(default)s)")
    t.add_argument("--lr-decay", type=float, default=0.1,
                   help="step mode's decay factor (default %(default)s)")
    t.add_argument("--warmup-epochs", type=float, default=0.0,
                   help="epochs of linear warmup from 0 to the scaled rate; about 5 helps large global "
                        "batches (default %(default)s)")
    t.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default %(default)s)")
    t.add_argument("--wd", type=float, default=1e-4, help="weight decay (default %(default)s)")
    t.add_argument("--label-smoothing", type=float, default=0.0,
                   help="label smoothing epsilon; 0 turns it off (default %(default)s)")
    t.add_argument("--seed", type=int, default=42,
                   help="random seed; rank r uses seed + r, parameters are broadcast from rank 0 "
                        "(default %(default)d)")

    c = p.add_argument_group("communication")
    c.add_argument("--gradient-predivide-factor", type=float, default=1.0,
                   help="divide gradients by this before the sum across ranks and by ranks/factor after "
                        "it, to keep float16 sums in range (default %(default)s)")
    c.add_argument("--fp16-allreduce", action="store_true",
                   help="send gradients as float16 (hvd.Compression.fp16) (default off)")

    o = p.add_argument_group("evaluation, checkpoints and output")
    o.add_argument("--eval-frequency", type=int, default=1,
                   help="validate every this many epochs (and after the last); 0 turns it off. Needs "
                        "--rec-val with --use-rec; synthetic data validates on random batches "
                        "(default %(default)d)")
    o.add_argument("--save-frequency", type=int, default=0,
                   help="checkpoint every this many epochs (and after the last); 0 turns it off "
                        "(default %(default)d)")
    o.add_argument("--save-dir", default="checkpoints",
                   help="checkpoint directory; rank 0 writes <model>-<epochs done>.params and .states "
                        "there. Every rank reads it on --resume, so share it between hosts "
                        "(default %(default)s)")
    o.add_argument("--resume", metavar="EPOCH|PREFIX",
                   help="continue from a checkpoint: an epoch count (loads <save-dir>/<model>-NNNN) or a "
                        "checkpoint path prefix ending in -NNNN. Loads parameters and trainer states, "
                        "then trains from epoch NNNN on")
    o.add_argument("--log-interval", type=int, default=20,
                   help="log training metrics every this many batches (default %(default)d)")
    o.add_argument("--verbose", action="store_true",
                   help="debug logging on every rank (default: level from $MXPLUGIN_EXAMPLE_LOG_LEVEL, else "
                        "info; ranks other than 0 log warnings and errors only)")
    args = p.parse_args(argv)

    if args.use_rec and not args.rec_train:
        p.error("--use-rec needs --rec-train")
    if not args.use_rec and (args.rec_train or args.rec_val):
        p.error("record files given without --use-rec: add --use-rec to train on them")
    for name in ("batch_size", "image_size", "num_classes", "num_epochs", "log_interval", "data_threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("num_batches", "eval_frequency", "save_frequency", "warmup_epochs", "label_smoothing"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if args.gradient_predivide_factor <= 0:
        p.error("--gradient-predivide-factor must be positive")
    try:
        args.lr_decay_epochs = sorted(float(e) for e in args.lr_decay_epoch.split(",") if e.strip())
    except ValueError:
        p.error(f"--lr-decay-epoch must be comma-separated numbers, got {args.lr_decay_epoch!r}")
    if args.use_rec:
        args.rec_train_idx = args.rec_train_idx or _index_beside(args.rec_train)
        if args.rec_val:
            args.rec_val_idx = args.rec_val_idx or _index_beside(args.rec_val)
    return args


def _index_beside(rec_path):
    return os.path.splitext(rec_path)[0] + ".idx"


def setup_logging(verbose, rank):
    """--verbose: debug everywhere. Otherwise $MXPLUGIN_EXAMPLE_LOG_LEVEL (a
    logging level name) or info on rank 0, and no more than warnings elsewhere."""
    if verbose:
        level = logging.DEBUG
    else:
        name = os.environ.get("MXPLUGIN_EXAMPLE_LOG_LEVEL", "info").strip().upper()
        level = logging.getLevelName(name)
        if not isinstance(level, int):
            raise SystemExit(f"MXPLUGIN_EXAMPLE_LOG_LEVEL={name!r} is not a logging level "
                             "(debug, info, warning, error)")
        if rank != 0:
            level = max(level, logging.WARNING)
    fmt = "%(message)s" if rank == 0 else f"[rank {rank}] %(levelname)s %(message)s"
    logging.basicConfig(level=level, format=fmt, stream=sys.stdout)


class LearningRateSchedule:
    """Learning rate of every batch: linear warmup (the first batch already
    takes a step, the last warmup batch reaches the full rate), then step
    decay at epoch boundaries or cosine annealing to 0 at num_epochs."""

    def __init__(self, base_lr, num_epochs, warmup_epochs, mode, decay_epochs, decay):
        self.base_lr = base_lr
        self.num_epochs = num_epochs
        self.warmup_epochs = warmup_epochs
        self.mode = mode
        self.decay_epochs = decay_epochs
        self.decay = decay

    def __call__(self, epoch, batch=0, steps=1):
        warmed = (epoch * steps + batch + 1) / (self.warmup_epochs * steps) if self.warmup_epochs else 1.0
        if warmed < 1.0:
            return self.base_lr * warmed
        progress = epoch + batch / steps
        if self.mode == "cosine":
            span = max(self.num_epochs - self.warmup_epochs, 1e-12)
            done = min(max(progress - self.warmup_epochs, 0.0) / span, 1.0)
            return self.base_lr * 0.5 * (1.0 + math.cos(math.pi * done))
        passed = sum(1 for e in self.decay_epochs if progress >= e)
        return self.base_lr * self.decay ** passed


# -- data -----------------------------------------------------------------------

def count_records(index_path):
    with open(index_path) as f:
        return sum(1 for line in f if line.strip())


class RecordData:
    """This rank's shards of ImageNet-style RecordIO files (each record an
    encoded image, JPEG as im2rec.py writes it, and its class; each shard at
    least one batch). Training: random resized crop and horizontal flip;
    validation: resize the shorter side to size/0.875 and take the centre
    crop. Both normalised with ImageNet's mean and std."""

    def __init__(self, args, rank, size):
        for path in (args.rec_train, args.rec_train_idx) + ((args.rec_val, args.rec_val_idx) if args.rec_val else ()):
            if not os.path.exists(path):
                raise SystemExit(f"{path} does not exist")
        self.batch_size = args.batch_size
        self.num_ranks = size
        common = dict(data_shape=(3, args.image_size, args.image_size), batch_size=args.batch_size,
                      mean_r=RGB_MEAN[0], mean_g=RGB_MEAN[1], mean_b=RGB_MEAN[2],
                      std_r=RGB_STD[0], std_g=RGB_STD[1], std_b=RGB_STD[2],
                      part_index=rank, num_parts=size, preprocess_threads=args.data_threads,
                      verbose=LOG.isEnabledFor(logging.DEBUG))
        self.num_train = count_records(args.rec_train_idx)
        self.train = mx.io.ImageRecordIter(
            path_imgrec=args.rec_train, path_imgidx=args.rec_train_idx, shuffle=True, seed=args.seed + rank,
            random_resized_crop=True, min_random_area=0.08, max_random_area=1.0,
            min_aspect_ratio=3.0 / 4.0, max_aspect_ratio=4.0 / 3.0, rand_mirror=True, **common)
        self.has_val = bool(args.rec_val)
        self.val_options = dict(path_imgrec=args.rec_val, path_imgidx=args.rec_val_idx, shuffle=False,
                                resize=int(math.ceil(args.image_size / 0.875)), rand_crop=False, **common)

    def train_steps(self):
        # Every rank must run the same number of steps (each step is a
        # collective) though shards differ in size: a shorter one is rewound.
        return max(1, self.num_train // (self.batch_size * self.num_ranks))

    def train_batches(self, steps):
        """Exactly `steps` (data, label) batches, rewinding the shard if it runs out."""
        self.train.reset()
        done, since_reset = 0, 0
        while done < steps:
            try:
                batch = self.train.next()
            except StopIteration:
                if since_reset == 0:
                    raise SystemExit("the training shard of this rank yields no batches")
                LOG.debug("training shard exhausted after %d batches; rewinding", done)
                self.train.reset()
                since_reset = 0
                continue
            since_reset += 1
            yield batch.data[0], batch.label[0]
            done += 1

    def val_batches(self, limit):
        """(data, label, pad) for this rank's validation shard; the last batch
        is filled up with `pad` images from the start, which must not count.
        A fresh iterator each time: after a reset(), ImageRecordIter starts
        where the previous pass's padding ended and reports pads that no
        longer cover each image exactly once."""
        if not self.has_val:
            return
        for i, batch in enumerate(mx.io.ImageRecordIter(**self.val_options)):
            if limit and i >= limit:
                break
            yield batch.data[0], batch.label[0], batch.pad


class SyntheticData:
    """One random training batch per rank, reused every step: measures
    training throughput without any input pipeline. Validation draws fresh
    random batches (images and labels the network never trained on), so its
    accuracy is chance level, as it should be, not memorisation."""

    def __init__(self, args, size, ctx):
        self.shape = (args.batch_size, 3, args.image_size, args.image_size)
        self.ctx = ctx
        self.num_classes = args.num_classes
        self.data, self.label = self._random_batch()
        self.batch_size = args.batch_size
        self.num_ranks = size
        self.num_train = args.num_train_images
        self.has_val = True

    def train_steps(self):
        return max(1, self.num_train // (self.batch_size * self.num_ranks))

    def _random_batch(self):
        data = mx.nd.random.uniform(-1, 1, shape=self.shape, ctx=self.ctx)
        label = mx.nd.random.randint(0, self.num_classes, shape=(self.shape[0],), ctx=self.ctx).astype("float32")
        return data, label

    def train_batches(self, steps):
        for _ in range(steps):
            yield self.data, self.label

    def val_batches(self, limit):
        steps = max(1, IMAGENET_VAL_IMAGES // (self.batch_size * self.num_ranks))
        for _ in range(min(steps, limit) if limit else steps):
            data, label = self._random_batch()
            yield data, label, 0


# -- model, checkpoints ------------------------------------------------------------

def create_network(args, ctx):
    try:
        net = gluon.model_zoo.vision.get_model(args.model, classes=args.num_classes)
    except ValueError as exc:
        raise SystemExit(f"--model {args.model}: {exc}")
    if args.dtype == "float16":
        net.cast("float16")  # BatchNorm keeps float32 parameters
    return net


def materialise(net, args, ctx):
    """Runs one image through the network so deferred shapes become real."""
    net(mx.nd.zeros((1, 3, args.image_size, args.image_size), ctx=ctx, dtype=args.dtype))
    if args.hybridize:
        net.hybridize(static_alloc=True, static_shape=True)


def build_network(args, ctx, resume_prefix):
    net = create_network(args, ctx)
    if resume_prefix:
        net.load_parameters(resume_prefix + ".params", ctx=ctx)
        LOG.info("Resumed parameters from %s.params", resume_prefix)
    else:
        net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2), ctx=ctx)
        LOG.info("Initialised parameters (Xavier, seed %d) and broadcast them from rank 0", args.seed)
    materialise(net, args, ctx)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)  # every rank starts from rank 0's values
    return net


# Note [Reading BatchNorm statistics]
# With --hybridize (static_alloc), MXNet 1.9 does not order a read of
# BatchNorm's running mean/variance after the training forward that updates
# them: without waiting for all pending work first, a copy or a checkpoint can
# get stale statistics.

def resume_point(args):
    """(checkpoint prefix, epochs already done) from --resume, or (None, 0)."""
    if not args.resume:
        return None, 0
    if args.resume.isdigit():
        epochs = int(args.resume)
        prefix = os.path.join(args.save_dir, f"{args.model}-{epochs:04d}")
    else:
        prefix = re.sub(r"\.(params|states)$", "", args.resume)
        match = re.search(r"-(\d+)$", prefix)
        if not match:
            raise SystemExit(f"--resume {args.resume}: expected an epoch count or a prefix ending in -NNNN")
        epochs = int(match.group(1))
    for suffix in (".params", ".states"):
        if not os.path.isfile(prefix + suffix):
            raise SystemExit(f"--resume {args.resume}: {prefix + suffix} does not exist")
    return prefix, epochs


def save_checkpoint(net, trainer, save_dir, model, epochs_done):
    """Rank 0 only. Written under a temporary name and renamed, so an
    interrupted save never leaves a half-written checkpoint behind."""
    os.makedirs(save_dir, exist_ok=True)
    mx.nd.waitall()  # see Note [Reading BatchNorm statistics]
    prefix = os.path.join(save_dir, f"{model}-{epochs_done:04d}")
    net.save_parameters(prefix + ".params.tmp")
    trainer.save_states(prefix + ".states.tmp")
    os.replace(prefix + ".params.tmp", prefix + ".params")
    os.replace(prefix + ".states.tmp", prefix + ".states")
    LOG.info("Saved checkpoint %s.params and %s.states", prefix, prefix)


# -- training ------------------------------------------------------------------------

class ProgressBar:
    """A one-line bar on stderr, only when stdout is a terminal (never in logs)."""

    WIDTH = 30

    def __init__(self, total, enabled):
        self.total = total
        self.enabled = enabled and sys.stdout.isatty()
        self.shown = False

    def update(self, done):
        if not self.enabled:
            return
        filled = self.WIDTH * done // max(self.total, 1)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{self.total}")
        sys.stderr.flush()
        self.shown = True

    def clear(self):
        if self.shown:
            sys.stderr.write("\r" + " " * (self.WIDTH + 24) + "\r")
            sys.stderr.flush()
            self.shown = False


def smoothed_targets(label, num_classes, epsilon):
    return mx.nd.one_hot(label, num_classes, on_value=1.0 - epsilon + epsilon / num_classes,
                         off_value=epsilon / num_classes)


def train_epoch(epoch, net, trainer, data, steps, schedule, args, ctx, rank, size):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=args.label_smoothing == 0)
    loss_metric, acc_metric = mx.metric.Loss(), mx.metric.Accuracy()
    bar = ProgressBar(steps, enabled=rank == 0)
    start = interval_start = time.time()
    interval_batches = 0
    for i, (x, y) in enumerate(data.train_batches(steps)):
        lr = schedule(epoch, i, steps)
        trainer.set_learning_rate(lr)
        x = x.as_in_context(ctx).astype(args.dtype, copy=False)
        y = y.as_in_context(ctx)
        target = smoothed_targets(y, args.num_classes, args.label_smoothing) if args.label_smoothing else y
        with autograd.record():
            out = net(x).astype("float32", copy=False)
            loss = loss_fn(out, target)
        loss.backward()
        trainer.step(args.batch_size)
        loss_metric.update(None, loss)
        acc_metric.update(y, out)
        interval_batches += 1
        bar.update(i + 1)
        if rank == 0 and ((i + 1) % args.log_interval == 0 or i + 1 == steps):
            per_rank = interval_batches * args.batch_size / (time.time() - interval_start)
            bar.clear()
            LOG.info("Epoch[%d] Batch[%d] loss=%.4f train-acc=%.4f lr=%.5f img/s per rank=%.1f total img/s=%.1f",
                     epoch, i + 1, loss_metric.get()[1], acc_metric.get()[1], lr, per_rank, per_rank * size)
            interval_start, interval_batches = time.time(), 0
    bar.clear()
    elapsed = time.time() - start
    per_rank = steps * args.batch_size / elapsed
    if rank == 0:
        LOG.info("Epoch[%d] done in %.1fs: loss=%.4f train-acc=%.4f (rank 0's shard) img/s per rank=%.1f "
                 "total img/s=%.1f", epoch, elapsed, loss_metric.get()[1], acc_metric.get()[1], per_rank,
                 per_rank * size)


def evaluate(epoch, net, data, args, ctx, rank):
    """Top-1 (and top-5) accuracy over every rank's validation shard."""
    mx.nd.waitall()  # see Note [Reading BatchNorm statistics]
    metrics = [mx.metric.Accuracy()]
    if args.num_classes >= 5:
        metrics.append(mx.metric.TopKAccuracy(top_k=5))
    start = time.time()
    for x, y, pad in data.val_batches(args.num_batches):
        out = net(x.as_in_context(ctx).astype(args.dtype, copy=False)).astype("float32", copy=False)
        keep = out.shape[0] - pad
        for metric in metrics:
            metric.update(y[:keep].as_in_context(ctx), out[:keep])
    local = []
    for metric in metrics:
        local += [metric.sum_metric, metric.num_inst]
    totals = hvd.allreduce(mx.nd.array(local, dtype="float64"), op=hvd.Sum, name="eval.counts").asnumpy()
    if rank == 0:
        images = int(totals[1])
        top1 = totals[0] / max(totals[1], 1)
        line = f"Epoch[{epoch}] Validation: top1-acc={top1:.4f}"
        if len(metrics) > 1:
            line += f" top5-acc={totals[2] / max(totals[3], 1):.4f}"
        LOG.info("%s (%d images, %.1fs)", line, images, time.time() - start)


def main(argv=None):
    args = parse_args(argv)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    setup_logging(args.verbose, rank)
    random.seed(args.seed + rank)
    np.random.seed(args.seed + rank)
    mx.random.seed(args.seed + rank)
    ctx = mx.gpu(hvd.local_rank()) if mx.context.num_gpus() > 0 else mx.cpu()
    if args.dtype == "float16" and ctx.device_type == "cpu":
        raise SystemExit("--dtype float16 needs a GPU: MXNet 1.9 has no float16 matrix multiply on CPU")

    data = RecordData(args, rank, size) if args.use_rec else SyntheticData(args, size, ctx)
    steps = data.train_steps()
    if args.num_batches:
        steps = min(steps, args.num_batches)
    base_lr = args.lr * args.batch_size * size / 256
    schedule = LearningRateSchedule(base_lr, args.num_epochs, args.warmup_epochs, args.lr_mode,
                                    args.lr_decay_epochs, args.lr_decay)
    LOG.info("%s on %d rank(s), %s, %s data: %d images per rank per step (%d global), %d steps per epoch, "
             "lr %.5f (%s%s)", args.model, size, ctx, "RecordIO" if args.use_rec else "synthetic",
             args.batch_size, args.batch_size * size, steps, base_lr, args.lr_mode,
             f", {args.warmup_epochs:g} warmup epochs" if args.warmup_epochs else "")

    resume_prefix, start_epoch = resume_point(args)
    net = build_network(args, ctx, resume_prefix)
    optimizer_params = {"learning_rate": schedule(start_epoch), "momentum": args.momentum, "wd": args.wd,
                        "multi_precision": args.dtype == "float16"}
    trainer = hvd.DistributedTrainer(
        net.collect_params(), "sgd", optimizer_params,
        gradient_predivide_factor=args.gradient_predivide_factor,
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none)
    if resume_prefix:
        trainer.load_states(resume_prefix + ".states")
        LOG.info("Loaded trainer states from %s.states (optimizer update count %d); continuing at epoch %d",
                 resume_prefix, trainer.optimizer.num_update, start_epoch)
    if start_epoch >= args.num_epochs:
        LOG.info("Nothing to do: the checkpoint has %d epochs and --num-epochs is %d", start_epoch, args.num_epochs)

    for epoch in range(start_epoch, args.num_epochs):
        train_epoch(epoch, net, trainer, data, steps, schedule, args, ctx, rank, size)
        last = epoch + 1 == args.num_epochs
        if args.eval_frequency and data.has_val and ((epoch + 1) % args.eval_frequency == 0 or last):
            evaluate(epoch, net, data, args, ctx, rank)
        if args.save_frequency and rank == 0 and ((epoch + 1) % args.save_frequency == 0 or last):
            save_checkpoint(net, trainer, args.save_dir, args.model, epoch + 1)
    mx.nd.waitall()  # collectives still pending at shutdown would fail
    hvd.shutdown()


if __name__ == "__main__":
    main()
