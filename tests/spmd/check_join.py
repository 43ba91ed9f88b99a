"""Uneven data: hvd.join() (Note [Joined ranks] in src/core/message_table.cc)
and join_when_done (Note [Shadow steps] in mxplugin/training/join.py).

Every rank has its own number of batches (BATCHES[size][rank]). Trainer
cases: after the loop, every rank's weights equal one process's that
trained, step by step, on the batches of the ranks still training at that
step combined (averaged over them, or over the initial size). Raw cases:
the others' collectives with a joined rank, what fails naming it, join()'s
return value, Horovod's own pattern (loop, then hvd.join()).

argv: cases (see CASES and RAW); default all."""
import sys
import time

from common import assert_close, finish, hvd, mx, np, say, start

from mxnet import autograd, gluon

from mxplugin.errors import ArgumentError

BATCH = 4
BATCHES = {1: [3], 2: [4, 2], 3: [4, 1, 0]}  # per rank; at 3 ranks one rank has no batch at all


def build_net(tag, hybridize=None):
    """Named by `tag`: ranks build different numbers of nets (references)."""
    mx.random.seed(7)
    net = gluon.nn.HybridSequential(prefix=f"{tag}_")
    with net.name_scope():
        net.add(gluon.nn.Dense(16, in_units=6, activation="relu"), gluon.nn.Dense(8, in_units=16, activation="relu"),
                gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Uniform(0.4))
    if hybridize is not None:
        net.hybridize(**hybridize)
    return net


def batch(step, rank):
    rng = np.random.RandomState(1000 * step + rank)
    return (mx.nd.array(rng.uniform(-1, 1, (BATCH, 6)).astype("float32")),
            mx.nd.array(rng.randint(0, 3, BATCH).astype("float32")))


LOSS = gluon.loss.SoftmaxCrossEntropyLoss()


def forward_backward(net, x, y):
    with autograd.record():
        loss = LOSS(net(x), y)
    loss.backward()


def reference(optimizer, params, size, initial):
    """One process on the ranks' batches that each step had, combined."""
    net = build_net("reference")
    trainer = gluon.Trainer(net.collect_params(), optimizer, dict(params), kvstore=None)
    counts = BATCHES[size]
    for step in range(max(counts)):
        active = [r for r in range(size) if counts[r] > step]
        xs, ys = zip(*[batch(step, r) for r in active])
        forward_backward(net, mx.nd.concat(*xs, dim=0), mx.nd.concat(*ys, dim=0))
        trainer.step(BATCH * (size if initial else len(active)))
    return net


SGD = ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01})
ADAM = ("adam", {"learning_rate": 0.02})


def distributed_trainer(**options):
    def make(net, optimizer, params, name):
        return hvd.DistributedTrainer(net.collect_params(), optimizer, dict(params), prefix=f"{name}.", **options)
    return make


def kvstore_trainer(net, optimizer, params, name):
    return gluon.Trainer(net.collect_params(), optimizer, dict(params), kvstore="mxplugin", update_on_kvstore=False)


def optimizer_trainer(net, optimizer, params, name):
    opt = hvd.DistributedOptimizer(mx.optimizer.create(optimizer, **params))
    return gluon.Trainer(net.collect_params(), opt, kvstore=None)


def mesh_trainer(net, optimizer, params, name):
    from mxplugin.parallel import ProcessMesh

    mesh = ProcessMesh(dp=hvd.size(), mp=1)
    return hvd.DistributedTrainer(net.collect_params(), optimizer, dict(params), prefix=f"{name}.", mesh=mesh)


# name: (optimizer, make trainer, hybridize, split step into allreduce_grads + update)
CASES = {
    "plain": (SGD, distributed_trainer(), None, False),
    "hybrid_static": (ADAM, distributed_trainer(), {"static_alloc": True, "static_shape": True}, False),
    "sharded": (ADAM, distributed_trainer(shard_optimizer_states=True), None, False),
    # full rank: PowerSGD's factors then carry the gradients exactly
    "powersgd": (SGD, distributed_trainer(compression=hvd.Compression.powersgd(rank=16)), None, False),
    "mesh": (SGD, mesh_trainer, None, False),
    "kvstore": (SGD, kvstore_trainer, None, False),
    "distributed_optimizer": (ADAM, optimizer_trainer, None, False),
    "allreduce_grads": (SGD, distributed_trainer(), None, True),
}


def check_trainer_case(name, initial, rank, size):
    (optimizer, params), make, hybridize, split = CASES[name]
    net = build_net(f"{name}{int(initial)}", hybridize)
    trainer = make(net, optimizer, params, f"{name}{int(initial)}")
    mine = BATCHES[size][rank]
    with hvd.join_when_done(trainer, divide_by_initial_size=initial) as joined:
        for step in range(mine):
            forward_backward(net, *batch(step, rank))
            if split:
                trainer.allreduce_grads()
                trainer.update(BATCH)
            else:
                trainer.step(BATCH)
    mx.nd.waitall()
    assert joined.shadow_steps == max(BATCHES[size]) - mine, (rank, joined.shadow_steps)
    expected = reference(optimizer, params, size, initial)
    for (pname, p), q in zip(net.collect_params().items(), expected.collect_params().values()):
        assert_close(p.data(), q.data().asnumpy(), rtol=2e-5, atol=2e-6,
                     what=f"{name} ({'initial size' if initial else 'ranks training'}): {pname}")
    say(f"rank {rank}: {name} initial={initial}: {mine} batches, {joined.shadow_steps} shadow steps; "
        f"weights equal one process")


def check_raw(rank, size):
    """The others' collectives while the last rank has joined."""
    joiner = size - 1
    if rank == joiner:
        last = hvd.join()
    else:
        others = size - 1
        for step in range(3):  # repeated: the names would be cached without a joined rank
            x = mx.nd.ones((4, 3)) * (rank + 1)
            assert_close(hvd.allreduce(x, op=hvd.Sum, name="raw.sum"), np.full((4, 3), others * (others + 1) / 2),
                         what="sum with a joined rank")
            assert_close(hvd.allreduce(x, name="raw.avg"), np.full((4, 3), others * (others + 1) / 2 / size),
                         what="average with a joined rank (over the set's size)")
            grouped = hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, name="raw.group")
            assert_close(grouped[1], np.full((4, 3), others * (others + 1)), what="grouped")
            gathered = hvd.allgather(mx.nd.ones((rank + 1, 2)) * rank, name="raw.gather")
            expected = np.concatenate([np.full((r + 1, 2), r, dtype="float32") for r in range(others)])
            assert_close(gathered, expected, what="allgather: the joined rank adds no rows")
            assert_close(hvd.broadcast(mx.nd.ones(3) * rank + 5, root_rank=0, name="raw.bcast"), np.full(3, 5.0),
                         what="broadcast")
            scattered = hvd.reducescatter(mx.nd.ones((2 * size, 2)), op=hvd.Sum, name="raw.scatter")
            assert_close(scattered, np.full(scattered.shape, others), what="reducescatter")
            hvd.barrier()
        failing = [("alltoall", lambda: hvd.alltoall(mx.nd.ones((size, 2)), name="raw.a2a"), "alltoall"),
                   ("a joined root", lambda: hvd.broadcast(mx.nd.ones(3), root_rank=joiner, name="raw.bj"),
                    "its root rank has joined")]
        for what, call, words in failing:
            try:  # a host alltoall raises from the call (one blocking round), the engine's op where it is read
                call().asnumpy()
            except (mx.base.MXNetError, hvd.MismatchError) as e:
                text = str(e)
                assert f"rank {joiner} has joined" in text and words in text, text
            else:
                raise AssertionError(f"rank {rank}: {what} with a joined rank did not fail")
        last = hvd.join()
    assert last in range(size - 1), f"rank {rank}: join() returned {last}; the last to join is one of the others"
    everyone = hvd.allgather_object(last, name="raw.last")
    assert len(set(everyone)) == 1, everyone
    # everything as before, cached again
    for _ in range(3):
        assert_close(hvd.allreduce(mx.nd.ones(2), op=hvd.Sum, name="raw.after"), np.full(2, size), what="after")
    say(f"rank {rank}: raw collectives with rank {joiner} joined; join() returned {last} on every rank")


def check_horovod_pattern(rank, size):
    """Horovod's own pattern: train on what this rank has, then hvd.join().
    The ranks still training average over the set's size with zeros from
    the joined ranks; a joined rank's weights stay where it stopped."""
    (optimizer, params), make, _, _ = CASES["plain"]
    net = build_net("horovod")
    trainer = make(net, optimizer, params, "horovod")
    mine = BATCHES[size][rank]
    for step in range(mine):
        forward_backward(net, *batch(step, rank))
        trainer.step(BATCH)
    last = hvd.join()
    most = BATCHES[size].index(max(BATCHES[size]))
    assert last == most, f"rank {rank}: join() returned {last}, expected {most} (the most batches)"
    if mine == max(BATCHES[size]):
        expected = reference(optimizer, params, size, initial=True)
        for (pname, p), q in zip(net.collect_params().items(), expected.collect_params().values()):
            assert_close(p.data(), q.data().asnumpy(), rtol=2e-5, atol=2e-6, what=f"horovod pattern: {pname}")
    say(f"rank {rank}: horovod pattern: join() returned {last}")


def check_sharded_needs_join_when_done(rank, size):
    """Horovod's pattern with sharded states cannot work (a joined rank
    neither updates nor gathers its slice): the ranks still training fail
    at once, pointing to join_when_done, and can then join themselves."""
    (optimizer, params), make, _, _ = CASES["sharded"]
    net = build_net("shardedjoin")
    trainer = make(net, optimizer, params, "shardedjoin")
    mine = BATCHES[size][rank]
    failed = False
    try:
        for step in range(mine):
            forward_backward(net, *batch(step, rank))
            trainer.step(BATCH)
            mx.nd.waitall()
    except mx.base.MXNetError as e:
        assert "join_when_done" in str(e) and "send no rows" in str(e), str(e)
        failed = True
    assert failed == (mine > min(BATCHES[size])), f"rank {rank}: failed={failed} with {mine} batches"
    hvd.join()
    say(f"rank {rank}: sharded states with join(): {'failed, naming join_when_done' if failed else 'joined'}")


def check_failed_join(rank, size):
    """A join that fails (the others called save_states(), a fence the joined
    rank went on without) ends the rank's join: its later calls count as
    its own, not stood in for."""
    (optimizer, params), make, _, _ = CASES["sharded"]
    net = build_net("failedjoin")
    trainer = make(net, optimizer, params, "failedjoin")
    forward_backward(net, *batch(0, rank))
    trainer.step(BATCH)
    mx.nd.waitall()
    try:
        if rank == size - 1:
            hvd.join()
        else:
            trainer.save_states(f"/tmp/mxplugin-failed-join-{rank}.states")
    except hvd.MismatchError as e:
        assert "save_states() (it gathers" in str(e) and "join 'mxplugin.join'" in str(e), str(e)
    else:
        raise AssertionError(f"rank {rank}: save_states() with a joined rank did not fail")
    if rank == size - 1:
        # Behind the others' call on purpose: were this rank still taken as
        # joined, theirs would complete without it (a sum of size - 1). With
        # the join ended, they wait for it whatever the timing.
        time.sleep(0.5)
    for _ in range(2):
        assert_close(hvd.allreduce(mx.nd.ones(2), op=hvd.Sum, name="failed.after"), np.full(2, size),
                     what="every rank in the sum after the failed join")
    say(f"rank {rank}: a failed join ends the join")


def check_process_set(rank, size):
    """join() on a process set: its other members' calls on the set take
    the joined rank's zeros; ranks outside it are untouched."""
    subset = hvd.ProcessSet([0, 1])
    hvd.add_process_set(subset)
    if rank == 1:
        last = hvd.join(process_set=subset)
    elif rank == 0:
        for _ in range(3):
            assert_close(hvd.allreduce(mx.nd.ones(3) * 7, op=hvd.Sum, name="set.sum", process_set=subset),
                         np.full(3, 7.0), what="allreduce on the set with rank 1 joined")
        last = hvd.join(process_set=subset)
    else:
        last = 0
    assert last == 0, f"rank {rank}: join() on the set returned {last}"
    assert_close(hvd.allreduce(mx.nd.ones(2), op=hvd.Sum, name="set.after"), np.full(2, size), what="global after")
    hvd.remove_process_set(subset)
    say(f"rank {rank}: join on a process set")


def check_local_sgd_refused(rank):
    net = build_net("localsgd")
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, prefix="localsgd.",
                                     local_sgd_steps=2)
    try:
        with hvd.join_when_done(trainer):
            pass
    except ArgumentError as e:
        assert "local_sgd_steps" in str(e), str(e)
        say(f"rank {rank}: local SGD refused")
        return
    raise AssertionError("join_when_done accepted local SGD")


def main():
    rank, size = start()
    names = sys.argv[1:] or list(CASES) + ["raw", "horovod", "local_sgd"]
    for name in names:
        if name == "raw":
            check_raw(rank, size)
        elif name == "horovod":
            check_horovod_pattern(rank, size)
        elif name == "sharded_join":
            check_sharded_needs_join_when_done(rank, size)
        elif name == "failed_join":
            check_failed_join(rank, size)
        elif name == "process_set":
            check_process_set(rank, size)
        elif name == "local_sgd":
            check_local_sgd_refused(rank)
        else:
            for initial in (False, True):
                check_trainer_case(name, initial, rank, size)
    finish()


if __name__ == "__main__":
    main()
