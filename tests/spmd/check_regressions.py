"""Regressions found in review: views of one array in one grouped in-place
call, control requests whose arguments differ across ranks, freezing a layer
(lr_mult = 0) mid-training, and per-parameter update counts of fused buckets."""
from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon


def check_views_in_one_group(rank, size):
    x = mx.nd.ones((2, 4)) * (rank + 1)
    hvd.grouped_allreduce_([x[0], x[1]], name="views", op=hvd.Sum)
    assert_close(x, np.full((2, 4), sum(range(1, size + 1))), what="views of one array")


def check_control_arguments_compared(rank, size):
    if size == 1:
        return  # needs two sets that differ from the global one
    a = hvd.add_process_set(hvd.ProcessSet([0]))
    b = hvd.add_process_set(hvd.ProcessSet([size - 1]))
    try:
        hvd.remove_process_set(a if rank == 0 else b)  # ranks disagree on which set
    except Exception as e:  # noqa: BLE001 - any clear error, never a hang
        for part in ("Mismatched control calls", f"remove_process_set(id {a.process_set_id}) on rank 0",
                     f"remove_process_set(id {b.process_set_id}) on rank{'s' if size > 2 else ''} 1"):
            assert part in str(e), str(e)
    else:
        raise AssertionError("disagreeing remove_process_set calls did not fail")
    hvd.barrier()  # the library still works


def net_and_data(seed):
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(6, in_units=5, activation="tanh"), gluon.nn.Dense(3, in_units=6))
    net.initialize(mx.init.Uniform(0.5))
    rng = np.random.RandomState(seed)
    return net, [(rng.uniform(-1, 1, (12, 5)).astype("float32"), rng.randint(0, 3, 12)) for _ in range(4)]


def check_freeze_mid_training_and_counts(rank, size):
    results = []
    for kind in ("gluon", "mxplugin"):
        net, data = net_and_data(2)
        if kind == "gluon":
            tr = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=None)
        else:
            tr = hvd.DistributedTrainer(net.collect_params(), "adam", {"learning_rate": 0.01})
        per = 12 // size
        for step, (x, y) in enumerate(data):
            if step == 2:
                net[0].weight.lr_mult = 0.0  # freeze the first layer's weight
            if kind == "mxplugin":
                x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
            with autograd.record():
                loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(mx.nd.array(x)), mx.nd.array(y))
            loss.backward()
            tr.step(x.shape[0])
        results.append((net, tr))
    (ref, ref_tr), (got, got_tr) = results
    for i, (a, b) in enumerate(zip(ref.collect_params().values(), got.collect_params().values())):
        assert_close(b.data(), a.data().asnumpy(), rtol=1e-4, atol=1e-6, what=f"freeze mid-training: parameter {i}")
    assert got_tr._optimizer._index_update_count == ref_tr._optimizer._index_update_count, (
        got_tr._optimizer._index_update_count, ref_tr._optimizer._index_update_count)


def main():
    rank, size = start()
    check_views_in_one_group(rank, size)
    check_control_arguments_compared(rank, size)
    check_freeze_mid_training_and_counts(rank, size)
    finish()


if __name__ == "__main__":
    main()
