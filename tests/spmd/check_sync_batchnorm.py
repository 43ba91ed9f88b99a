"""mxplugin.SyncBatchNorm (Note [Statistics of the combined batch] in
mxplugin/training/sync_batchnorm.py) against one process's BatchNorm on the
combined batch: outputs, input and parameter gradients and the running
statistics after 3 steps, hybridized and not, legacy and NumPy arrays, each
rank with a batch of its own size; a model-zoo ResNet converted by
convert_sync_batchnorm trains 3 steps with DistributedTrainer to the weights
of one process's gluon.Trainer on the combined batch."""
from common import assert_close, finish, hvd, mx, np, start

from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

CHANNELS = 3
RESNET_BATCH = 12  # the combined batch, split evenly
STEPS = 3


def batch_sizes(size):
    return [2 + r for r in range(size)]  # uneven: 2, 3, 4 images


def step_data(step, size, shape):
    """The combined batch of step `step` (inputs and output gradients) and
    where each rank's part starts."""
    rng = np.random.RandomState(100 + step)
    sizes = batch_sizes(size)
    x = (rng.randn(sum(sizes), *shape) * 2 + 1).astype("float32")
    dy = rng.randn(sum(sizes), *shape).astype("float32")
    return x, dy, np.cumsum([0] + sizes)


def layer(cls, hybridize, to_array=mx.nd.array):
    block = cls(in_channels=CHANNELS, momentum=0.8)
    block.initialize()
    block.gamma.set_data(to_array([1.5, 0.5, 2.0]))
    block.beta.set_data(to_array([0.1, -0.2, 0.3]))
    if hybridize:
        block.hybridize()
    return block


def run_steps(block, parts, to_array):
    """STEPS steps of `block` on `parts(step)` = (x, dy); per step (y, dx,
    dgamma, dbeta) as NumPy."""
    out = []
    for s in range(STEPS):
        x, dy = parts(s)
        x = to_array(x)
        x.attach_grad()
        with autograd.record():
            y = block(x)
        y.backward(to_array(dy))
        out.append((y.asnumpy(), x.grad.asnumpy(), block.gamma.grad().asnumpy(), block.beta.grad().asnumpy()))
    return out


def check_layer(rank, size, hybridize, numpy_arrays, shape=(CHANNELS, 4, 5)):
    what = f"hybridize={hybridize} numpy={numpy_arrays} shape={shape}"
    to_array = mx.np.array if numpy_arrays else mx.nd.array
    with mx.util.np_shape(numpy_arrays), mx.util.np_array(numpy_arrays):
        ours = layer(hvd.SyncBatchNorm, hybridize, to_array)

        def mine(s):
            x, dy, at = step_data(s, size, shape)
            return x[at[rank]:at[rank + 1]], dy[at[rank]:at[rank + 1]]
        got = run_steps(ours, mine, to_array)
        ours_mean, ours_var = ours.running_mean.data().asnumpy(), ours.running_var.data().asnumpy()
    ref = layer(gluon.nn.BatchNorm, False)
    expected = run_steps(ref, lambda s: step_data(s, size, shape)[:2], mx.nd.array)
    for s in range(STEPS):
        at = step_data(s, size, shape)[2]
        y, dx, dgamma, dbeta = got[s]
        ry, rdx, rdgamma, rdbeta = expected[s]
        assert_close(y, ry[at[rank]:at[rank + 1]], rtol=1e-4, atol=1e-5, what=f"{what}: output, step {s}")
        assert_close(dx, rdx[at[rank]:at[rank + 1]], rtol=1e-4, atol=1e-5, what=f"{what}: input gradient, step {s}")
        # gamma's and beta's gradients are this rank's part; the ranks' parts add up to one process's.
        assert_close(hvd.allreduce(mx.nd.array(dgamma), op=hvd.Sum, name=f"sbn.dg.{what}.{s}"), rdgamma,
                     rtol=1e-4, atol=1e-4, what=f"{what}: gamma's gradient, step {s}")
        assert_close(hvd.allreduce(mx.nd.array(dbeta), op=hvd.Sum, name=f"sbn.db.{what}.{s}"), rdbeta,
                     rtol=1e-4, atol=1e-4, what=f"{what}: beta's gradient, step {s}")
    assert_close(ours_mean, ref.running_mean.data().asnumpy(), rtol=1e-5, atol=1e-6, what=f"{what}: running mean")
    assert_close(ours_var, ref.running_var.data().asnumpy(), rtol=1e-5, atol=1e-6, what=f"{what}: running var")


def resnet(converted):
    mx.random.seed(3)
    net = vision.resnet18_v1(classes=4)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, 3, 32, 32)))  # initialized now, with the same draws in both nets
    if converted:
        hvd.convert_sync_batchnorm(net)
    return net


def train_resnet(net, trainer, rank_slice, steps_scale, divide_by):
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    for s in range(STEPS):
        rng = np.random.RandomState(7 + s)
        x = rng.uniform(-1, 1, (RESNET_BATCH, 3, 32, 32)).astype("float32") * steps_scale
        y = (np.arange(RESNET_BATCH) % 4).astype("float32")
        with autograd.record():
            out = loss(net(mx.nd.array(x[rank_slice])), mx.nd.array(y[rank_slice]))
        out.backward()
        trainer.step(divide_by)
    return [(name, p.data().asnumpy()) for name, p in net.collect_params().items()]


def check_resnet(rank, size):
    """A freshly initialized ResNet on random images is chaotic: one
    process's own weights after 3 steps move by up to percents when its
    input moves by 1e-6 (relative). So the converted model is held to that
    noise, measured here: ten times one process's change under such a
    perturbation (plus 1e-6)."""
    net = resnet(True)
    assert sum(isinstance(b, hvd.SyncBatchNorm) for b in _blocks(net)) == 20, "not every BatchNorm converted"
    assert not any(isinstance(b, gluon.nn.BatchNorm) and not isinstance(b, hvd.SyncBatchNorm) for b in _blocks(net))
    net.hybridize()
    params = {"learning_rate": 0.01, "momentum": 0.9}
    per = RESNET_BATCH // size
    mine = slice(rank * per, (rank + 1) * per)
    # The ranks' gradients are averaged: each rank's batch is 1/size of the combined one.
    ours = train_resnet(net, hvd.DistributedTrainer(net.collect_params(), "sgd", dict(params)), mine, 1.0, per)
    weights = []
    for scale in (1.0, 1.0 + 1e-6):
        ref = resnet(False)
        ref.hybridize()
        trainer = gluon.Trainer(ref.collect_params(), "sgd", dict(params), kvstore=None)
        weights.append(train_resnet(ref, trainer, slice(None), scale, RESNET_BATCH))
    for (name, w), (_, expected), (_, perturbed) in zip(ours, *weights):
        noise = float(np.abs(expected - perturbed).max())
        assert_close(w, expected, rtol=0, atol=10 * noise + 1e-6,
                     what=f"resnet18_v1 converted: {name} (one process's own noise {noise:.2g})")


def _blocks(block):
    yield block
    for child in block._children.values():
        yield from _blocks(child)


def main():
    rank, size = start()
    for hybridize in (False, True):
        check_layer(rank, size, hybridize, numpy_arrays=False)
    check_layer(rank, size, False, numpy_arrays=True)
    check_layer(rank, size, True, numpy_arrays=False, shape=(CHANNELS,))
    check_resnet(rank, size)
    finish()


if __name__ == "__main__":
    main()
