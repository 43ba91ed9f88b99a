"""Compression.powersgd and Compression.bf16 (mxplugin/training/powersgd.py).

  reference: the compressor alone against a NumPy version of Note [PowerSGD
    step], on random matrices of both orientations and a conv kernel
    (float64, float32, float16), three steps with error feedback;
  full rank: a DistributedTrainer whose rank is every matrix's full rank
    equals gluon.Trainer on the whole batch (and rank 1 does not);
  state: after save -> load at the same size through elastic GluonState,
    and (3 ranks) at 2 ranks through states_bytes, training goes on exactly
    as it would have (Note [PowerSGD state across worlds]);
  converges: the digits MLP and a small CNN on the 8x8 digits, PowerSGD at
    rank 2 and 4 and bf16, reach the uncompressed test accuracy (rank 0
    prints them; see check_convergence for the tolerance).
argv: the parts to run (default: all), convergence[:models[:seeds[:tolerance]]]."""
import os
import shutil
import sys
import tempfile

from common import assert_close, finish, hvd, mx, np, rank_data, say, start

from mxnet import autograd, gluon

from mxplugin.ops import BFLOAT16
from mxplugin.errors import ArgumentError
from mxplugin.training.powersgd import _SEED, PowerSGDReducer

rank, size = start()
GLOBAL_BATCH = 12


# -- reference --------------------------------------------------------------------
def oriented(m):
    return m.T if m.shape[0] > m.shape[1] else m


def unoriented(a, shape):
    """The rows x cols product `a` as the gradient's (m x n) matrix."""
    return a.T if shape[0] > shape[1] else a


def reference_steps(shapes, dtype, r, steps, prescale):
    """Per step and tensor: (reduced gradient, this rank's error), by NumPy
    in float64 from every rank's gradients."""
    qs, errors, out = {}, {}, []
    for step in range(steps):
        results = []
        for k, shape in enumerate(shapes):
            m, n = shape[0], int(np.prod(shape[1:]))
            rows, cols = min(m, n), max(m, n)
            rk = min(r, rows)
            if k not in qs:
                qs[k] = np.random.RandomState(_SEED + k).standard_normal((rk, cols)).astype(dtype).T.astype("f8")
                errors[k] = [np.zeros((m, n)) for _ in range(size)]
            ms = [gradient(shape, w, step, k, dtype).astype("f8").reshape(m, n) + errors[k][w] for w in range(size)]
            p = sum(oriented(mw) @ qs[k] for mw in ms)
            p_hat = np.linalg.qr(p)[0]
            q_ws = [oriented(mw).T @ p_hat for mw in ms]
            errors[k] = [mw - unoriented(p_hat @ qw.T, (m, n)) for mw, qw in zip(ms, q_ws)]
            qs[k] = sum(q_ws) * prescale
            results.append((unoriented(p_hat @ qs[k].T, (m, n)), errors[k][rank]))
        out.append(results)
    return out


def gradient(shape, w, step, k, dtype):
    return rank_data(shape, w, dtype, seed=100 * step + k)


def check_reference():
    cases = (("float64", 2, 1e-9), ("float32", 2, 2e-4), ("float32", 3, 2e-4), ("float16", 2, 2e-2))
    shapes = [(6, 10), (12, 5), (4, 3, 2, 2)]
    for dtype, r, rtol in cases:
        prescale = 0.5
        reducer = PowerSGDReducer(hvd.Compression.powersgd(rank=r, min_compression_rate=0), f"ref.{dtype}.{r}.")
        expected = reference_steps(shapes, dtype, r, 3, prescale)
        for step, results in enumerate(expected):
            grads = [mx.nd.array(gradient(s, rank, step, k, dtype), dtype=dtype) for k, s in enumerate(shapes)]
            reducer.reduce(list(enumerate(grads)), hvd.global_process_set, prescale)
            for k, (grad, (want, error)) in enumerate(zip(grads, results)):
                what = f"{dtype} rank {r}, step {step}, tensor {shapes[k]}"
                scale = np.abs(want).max()
                assert_close(grad.asnumpy().reshape(want.shape), want, rtol=rtol, atol=rtol * scale,
                             what=f"reduced gradient, {what}")
                assert_close(reducer.factors[k].error, error, rtol=rtol, atol=rtol * scale, what=f"error, {what}")
    say(f"ok reference {rank}")


# -- bf16 and refusals ---------------------------------------------------------------
def check_bf16():
    """Sums exactly representable in bfloat16 (multiples of 1/8 below 16)."""
    parts = [np.random.RandomState(r).randint(-40, 41, (5, 3)) / 8.0 for r in range(size)]
    mine = mx.nd.array(parts[rank]).astype(BFLOAT16)
    assert mine.dtype == BFLOAT16, mine.dtype
    total = hvd.allreduce(mine, op=hvd.Sum, name="bf16.sum")
    assert total.dtype == BFLOAT16, total.dtype
    assert_close(total.astype("float32"), sum(parts), what="bfloat16 allreduce Sum")
    assert_close(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=0.5, name="bf16.pre").astype("float32"),
                 sum(parts) * 0.5, what="bfloat16 allreduce with prescale")
    assert_close(hvd.broadcast(mine, root_rank=0, name="bf16.bcast").astype("float32"), parts[0],
                 what="bfloat16 broadcast")
    sent, ctx = hvd.Compression.bf16.compress(mx.nd.array(parts[rank]))
    assert sent.dtype == BFLOAT16 and hvd.Compression.bf16.decompress(sent, ctx).dtype == np.float32
    ints, ctx = hvd.Compression.bf16.compress(mx.nd.array([1, 2], dtype="int32"))
    assert ints.dtype == np.int32, "integers are sent as they are"
    say(f"ok bf16 {rank}")


def refused(fn, *words):
    try:
        fn()
    except ArgumentError as e:
        assert all(w in str(e) for w in words), f"rank {rank}: {e}"
    else:
        raise AssertionError(f"rank {rank}: not refused: {words}")


def check_refusals():
    net = small_net(1)
    params = net.collect_params()
    refused(lambda: hvd.Compression.powersgd(rank=0), "rank", "0")
    refused(lambda: hvd.Compression.powersgd(rank=2.5), "rank")
    refused(lambda: hvd.Compression.powersgd(warmup_steps=-1), "warmup_steps")
    refused(lambda: hvd.Compression.powersgd(min_compression_rate="2"), "min_compression_rate")
    psgd = hvd.Compression.powersgd(rank=2)
    refused(lambda: hvd.DistributedTrainer(params, "sgd", {}, compression=psgd, local_sgd_steps=2),
            "local_sgd_steps", "powersgd")
    refused(lambda: hvd.DistributedTrainer(params, "sgd", {}, compression=psgd, shard_optimizer_states=True),
            "shard_optimizer_states", "compression")
    say(f"ok refusals {rank}")


# -- full rank ----------------------------------------------------------------------
def small_net(seed):
    """A conv kernel (4 x 18), a matrix taken transposed (40 x 36) and one
    not (3 x 40), and their biases."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(4, kernel_size=3, in_channels=2, activation="relu"), gluon.nn.Flatten(),
            gluon.nn.Dense(40, in_units=36, activation="tanh"), gluon.nn.Dense(3, in_units=40))
    net.initialize(mx.init.Uniform(0.5))
    net.hybridize()
    return net


def small_batch(step, ranks=None, me=None):
    rng = np.random.RandomState(100 + step)
    x, y = rng.uniform(-1, 1, (GLOBAL_BATCH, 2, 5, 5)).astype("float32"), rng.randint(0, 3, GLOBAL_BATCH)
    if ranks is not None:
        per = GLOBAL_BATCH // ranks
        x, y = x[me * per:(me + 1) * per], y[me * per:(me + 1) * per]
    return mx.nd.array(x), mx.nd.array(y)


def train_small(net, trainer, first, steps, ranks=None, me=None):
    for s in range(first, first + steps):
        x, y = small_batch(s, ranks, me)
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(x.shape[0])


def weights(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


SGD = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}


def check_full_rank():
    if size == 1:
        return  # one rank reduces nothing, so compresses nothing
    ref = small_net(1)
    train_small(ref, gluon.Trainer(ref.collect_params(), "sgd", dict(SGD), kvstore=None), 0, 4)
    for r, equal in ((64, True), (1, False)):
        net = small_net(1)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD), gradient_predivide_factor=2.0,
                                         compression=hvd.Compression.powersgd(rank=r, min_compression_rate=0))
        train_small(net, trainer, 0, 4, size, rank)
        assert len(trainer._powersgd.factors) == 3, f"rank {rank}: compressed {sorted(trainer._powersgd.factors)}"
        for i, (got, want) in enumerate(zip(weights(net), weights(ref))):
            if equal:
                assert_close(got, want, rtol=1e-4, atol=1e-5, what=f"full rank: parameter {i}")
        if not equal:
            assert any(not np.allclose(g, w, rtol=1e-3, atol=1e-4) for g, w in zip(weights(net), weights(ref))), \
                f"rank {rank}: rank-1 PowerSGD trained exactly as the uncompressed trainer: nothing was compressed"
    say(f"ok full rank {rank}")


# -- state across worlds ---------------------------------------------------------------
def powersgd_trainer(net, **options):
    return hvd.DistributedTrainer(net.collect_params(), "sgd", dict(SGD), compression=hvd.Compression.powersgd(
        rank=2, warmup_steps=1, min_compression_rate=0), **options)


def check_elastic_state():
    """commit -> a fresh model and trainer given the committed state by
    rank 0 (a new world's rank 0 applies the handed-over snapshot) -> sync:
    the same weights after three more steps as without the reset."""
    net = small_net(1)
    trainer = powersgd_trainer(net)
    state = hvd.elastic.GluonState(net, trainer, epoch=0)
    state.sync()
    train_small(net, trainer, 0, 3, size, rank)
    state.commit()
    blob = state.dumps()
    directory = hvd.broadcast_object(tempfile.mkdtemp() if rank == 0 else None, name="psgd.dir")
    path = os.path.join(directory, "trainer.states")
    trainer.save_states(path)  # every rank: the errors are summed
    hvd.barrier()
    plain = gluon.Trainer(small_net(1).collect_params(), "sgd", dict(SGD), kvstore=None)
    plain.load_states(path)  # gluon.Trainer skips the PowerSGD entry
    assert len(plain._updaters[0].states) >= 6, plain._updaters[0].states.keys()
    hvd.barrier()
    if rank == 0:
        shutil.rmtree(directory)
    train_small(net, trainer, 3, 3, size, rank)
    net2 = small_net(2 + rank)
    trainer2 = powersgd_trainer(net2)
    state2 = hvd.elastic.GluonState(net2, trainer2, epoch=0)
    if rank == 0:
        state2.loads(blob)
    state2.sync()
    errors = {i: f.error.asnumpy() for i, f in trainer2._powersgd.factors.items()}
    assert len(errors) == 3 and trainer2._powersgd.steps == 3, (rank, sorted(errors), trainer2._powersgd.steps)
    train_small(net2, trainer2, 3, 3, size, rank)
    for i, (got, want) in enumerate(zip(weights(net2), weights(net))):
        assert_close(got, want, rtol=1e-4, atol=1e-6, what=f"after an elastic reset: parameter {i}")
    say(f"ok elastic state {rank}")


def check_fewer_ranks():
    """(3 ranks) states saved at 3 ranks and loaded by a trainer of 2: each
    of the 2 holds half the errors' sum and the training goes on as at 3."""
    if size != 3:
        return
    net = small_net(1)
    trainer = powersgd_trainer(net)
    train_small(net, trainer, 0, 3, size, rank)
    blob = trainer.states_bytes()
    saved = weights(net)
    error_sums = {i: hvd.allreduce(f.error, op=hvd.Sum, name=f"errsum{i}").asnumpy()
                  for i, f in trainer._powersgd.factors.items()}
    train_small(net, trainer, 3, 3, size, rank)
    pair = hvd.add_process_set([0, 1])
    if rank < 2:
        net2 = small_net(5)
        for p, w in zip(net2.collect_params().values(), saved):
            p.set_data(mx.nd.array(w))
        # Named: only these ranks make it, so counted names would differ later
        trainer2 = powersgd_trainer(net2, process_set=pair, prefix="pair.")
        trainer2.load_states_bytes(blob)
        for i, f in trainer2._powersgd.factors.items():
            assert_close(hvd.allreduce(f.error, op=hvd.Sum, name=f"pairsum{i}", process_set=pair), error_sums[i],
                         rtol=1e-5, atol=1e-6, what=f"errors' sum of parameter {i} at 2 ranks")
        train_small(net2, trainer2, 3, 3, 2, rank)
        for i, (got, want) in enumerate(zip(weights(net2), weights(net))):
            assert_close(got, want, rtol=1e-4, atol=1e-6, what=f"3 -> 2 ranks: parameter {i}")
    hvd.remove_process_set(pair)
    say(f"ok fewer ranks {rank}")


# -- convergence ---------------------------------------------------------------------------
def digits():
    from digits_data import load_digits

    images, labels = load_digits()
    x, y = (images / 16.0).astype("float32"), labels.astype("float32")
    order = np.random.RandomState(42).permutation(len(x))
    split = int(0.8 * len(x))
    return (x[order[:split]], y[order[:split]]), (x[order[split:]], y[order[split:]])


def digits_net(kind, seed):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    if kind == "cnn":
        net.add(gluon.nn.Conv2D(16, 3, padding=1, activation="relu"), gluon.nn.Conv2D(32, 3, padding=1,
                                                                                     activation="relu"),
                gluon.nn.MaxPool2D(2), gluon.nn.Flatten(), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    else:
        net.add(gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def accuracy_after_training(kind, compression, data, epochs, seed, batch=64):
    """SGD with momentum, the learning rate a tenth for the last quarter."""
    (x_train, y_train), (x_test, y_test) = data
    shape = (-1, 1, 8, 8) if kind == "cnn" else (-1, 64)
    net = digits_net(kind, seed)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                     compression=compression)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    per = batch // size
    for epoch in range(epochs):
        order = np.random.RandomState(epoch).permutation(len(x_train))
        if epoch == int(epochs * 0.75):
            trainer.set_learning_rate(trainer.learning_rate * 0.1)
        for step in range(len(x_train) // batch):
            idx = order[step * batch:(step + 1) * batch][rank * per:(rank + 1) * per]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(x_train[idx].reshape(shape))), mx.nd.array(y_train[idx]))
            loss.backward()
            trainer.step(per)
    pred = net(mx.nd.array(x_test.reshape(shape))).argmax(axis=1).asnumpy()
    return float((pred == y_test).mean()), trainer


EPOCHS = {"mlp": 20, "cnn": 10}
COMPRESSIONS = (("powersgd rank 2", lambda: hvd.Compression.powersgd(rank=2, warmup_steps=20)),
                ("powersgd rank 4", lambda: hvd.Compression.powersgd(rank=4, warmup_steps=20)),
                ("bf16", lambda: hvd.Compression.bf16))


def check_convergence(models="mlp,cnn", seeds="42", tolerance="0.015"):
    """Per model, the test accuracy averaged over `seeds` (the initial
    weights') is at most `tolerance` below the uncompressed one. A single
    run's accuracy on the 360 test digits moves by about a point from seed
    to seed, compressed or not (5 seeds: 0.958-0.975 for the uncompressed
    MLP), so one seed is held to 1.5 points; the 0.5 points of the issue
    hold for the mean of 5 seeds (bench/powersgd_accuracy.py)."""
    tolerance = float(tolerance)
    data = digits()
    for kind in models.split(","):
        found = {}
        for seed in map(int, seeds.split(",")):
            for label, compression in (("uncompressed", lambda: hvd.Compression.none),) + COMPRESSIONS:
                acc, trainer = accuracy_after_training(kind, compression(), data, EPOCHS[kind], seed)
                found.setdefault(label, []).append(acc)
                if label.startswith("powersgd"):
                    assert trainer._powersgd.factors, f"{kind}: nothing compressed"
        hvd.barrier()
        if rank == 0:
            say(f"accuracy {kind} at {size} ranks, seeds {seeds}: " +
                ", ".join(f"{k} {' '.join(f'{a:.4f}' for a in v)}" for k, v in found.items()))
        base = np.mean(found.pop("uncompressed"))
        for label, accs in found.items():
            assert np.mean(accs) >= base - tolerance, \
                f"{kind}, {label}: mean test accuracy {np.mean(accs):.4f} against {base:.4f} uncompressed"
    say(f"ok convergence {rank}")


PARTS = {"reference": check_reference, "bf16": check_bf16, "refusals": check_refusals, "full_rank": check_full_rank, "elastic_state": check_elastic_state,
         "fewer_ranks": check_fewer_ranks, "convergence": check_convergence}


def main():
    for part in sys.argv[1:] or PARTS:
        name, *args = part.split(":")  # e.g. convergence:mlp:1,2,3
        PARTS[name](*args)
    finish()


if __name__ == "__main__":
    main()
