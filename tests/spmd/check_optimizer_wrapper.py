"""DistributedOptimizer (Horovod semantics) in a custom loop equals
single-process updates on the whole batch."""
from common import assert_close, finish, hvd, mx, np, start

GLOBAL_BATCH = 12


def main():
    rank, size = start()
    rng = np.random.RandomState(0)
    w0 = rng.uniform(-1, 1, (5, 3)).astype("float32")
    xs = [rng.uniform(-1, 1, (GLOBAL_BATCH, 5)).astype("float32") for _ in range(3)]
    ref_w, w = mx.nd.array(w0), mx.nd.array(w0)
    ref_opt = mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9, rescale_grad=1.0 / GLOBAL_BATCH)
    opt = hvd.DistributedOptimizer(mx.optimizer.create("sgd", learning_rate=0.1, momentum=0.9,
                                                       rescale_grad=1.0 / (GLOBAL_BATCH // size)))
    ref_state, state = ref_opt.create_state(0, ref_w), opt.create_state(0, w)
    per = GLOBAL_BATCH // size
    for x in xs:
        # d/dw of sum((x @ w)^2) = 2 x^T (x w)
        ref_g = mx.nd.array(2 * x.T @ (x @ ref_w.asnumpy()))
        mine = x[rank * per:(rank + 1) * per]
        g = mx.nd.array(2 * mine.T @ (mine @ w.asnumpy()))
        ref_opt.update(0, ref_w, ref_g, ref_state)
        opt.update(0, w, g, state)
    assert_close(w, ref_w.asnumpy(), rtol=1e-5, what="DistributedOptimizer")
    assert opt.learning_rate == 0.1  # attributes forward to the wrapped optimizer
    for num_groups in (0, 2, 5):
        check_list_updates(rank, size, num_groups)
    finish()


def check_list_updates(rank, size, num_groups):
    """An update of several indices at once, as MXNet's updater makes it when
    the optimizer aggregates (Module.update): per tensor, or in num_groups
    grouped allreduces; each rank's gradients differ, the result is their mean."""
    rng = np.random.RandomState(1)
    shapes = [(4, 3), (7,), (2, 2, 2), (5,), (3, 1)]
    ws = [rng.uniform(-1, 1, s).astype("float32") for s in shapes]
    grads = [[rng.uniform(-1, 1, s).astype("float32") for s in shapes] for _ in range(size)]
    ref_opt = mx.optimizer.create("sgd", learning_rate=0.5)
    opt = hvd.DistributedOptimizer(mx.optimizer.create("sgd", learning_rate=0.5), num_groups=num_groups)
    mine = [mx.nd.array(w) for w in ws]
    indices = list(range(len(shapes)))
    opt.update(indices, mine, [mx.nd.array(g) for g in grads[rank]], [None] * len(shapes))
    for i, w in enumerate(ws):
        ref = mx.nd.array(w)
        ref_opt.update(i, ref, mx.nd.array(np.mean([g[i] for g in grads], axis=0)), None)
        assert_close(mine[i], ref.asnumpy(), rtol=1e-5, what=f"num_groups={num_groups}, index {i}")


if __name__ == "__main__":
    main()
