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
    finish()


if __name__ == "__main__":
    main()
