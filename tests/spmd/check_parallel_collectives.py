"""mxplugin.parallel's differentiable collectives against a serial computation
(every rank recomputes every rank's inputs), plus ProcessMesh and
mark_distributed. Any world size.

Sum-of-losses family: rank r's loss is sum(y_r * c_r) with a per-rank
cotangent c_r, the total loss is the sum over ranks, so the expected gradient
of x_r is d(sum_k sum(y_k * c_k)) / dx_r. Replicated-loss family: every rank's
loss is the same L, and the expected gradient is dL/dx."""
import common
from common import assert_close, hvd, mx, np, rank_data

from mxnet import autograd

from mxplugin import parallel

rank, size = common.start()
TOL = dict(rtol=1e-5, atol=1e-5)


def raises(exc, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc:
        return
    raise AssertionError(f"rank {rank}: {fn.__name__} did not raise {exc.__name__}")


def run(fn, x_np, cot_np):
    """y = fn(x) recorded, backward of sum(y * cot); returns (y, x.grad) as numpy."""
    x = mx.nd.array(x_np)
    x.attach_grad()
    with autograd.record():
        y = fn(x)
        loss = (y * mx.nd.array(cot_np)).sum()
    loss.backward()
    return y.asnumpy(), x.grad.asnumpy()


def check_sum_family(ps, tag):
    members = ps.ranks
    n = len(members)
    me = members.index(rank)
    xs = {r: rank_data((3, 4), r, seed=1) for r in members}
    cs = {r: rank_data((3, 4), r, seed=2) for r in members}
    total_x = sum(xs[r].astype("float64") for r in members)
    total_c = sum(cs[r].astype("float64") for r in members)

    # allreduce Sum / Average
    y, g = run(lambda x: parallel.allreduce(x, op=hvd.Sum, process_set=ps, name="ar"), xs[rank], cs[rank])
    assert_close(y, total_x, **TOL, what=f"{tag} allreduce Sum forward")
    assert_close(g, total_c, **TOL, what=f"{tag} allreduce Sum gradient")
    y, g = run(lambda x: parallel.allreduce(x, op=hvd.Average, process_set=ps), xs[rank], cs[rank])
    assert_close(y, total_x / n, **TOL, what=f"{tag} allreduce Average forward")
    assert_close(g, total_c / n, **TOL, what=f"{tag} allreduce Average gradient")

    # allgather, equal rows (reducescatter backward) and rank-dependent rows (allreduce + slice)
    for label, rows in (("equal", {r: 2 for r in members}), ("unequal", {r: i + 1 for i, r in enumerate(members)})):
        total_rows = sum(rows.values())
        xg = {r: rank_data((rows[r], 3), r, seed=3) for r in members}
        cg = {r: rank_data((total_rows, 3), r, seed=4) for r in members}
        y, g = run(lambda x: parallel.allgather(x, process_set=ps), xg[rank], cg[rank])
        assert_close(y, np.concatenate([xg[r] for r in members]), **TOL, what=f"{tag} allgather {label} forward")
        start = sum(rows[r] for r in members[:me])
        summed = sum(cg[r].astype("float64") for r in members)
        assert_close(g, summed[start:start + rows[rank]], **TOL, what=f"{tag} allgather {label} gradient")

    # broadcast from every member
    for root in members:
        y, g = run(lambda x: parallel.broadcast(x, root, process_set=ps), xs[rank], cs[rank])
        assert_close(y, xs[root], what=f"{tag} broadcast from {root} forward")
        assert_close(g, total_c if rank == root else np.zeros_like(total_c), **TOL,
                     what=f"{tag} broadcast from {root} gradient")

    # reducescatter Sum / Average over 2n+1 rows (lower ranks get an extra row)
    total_rows = 2 * n + 1
    block = [total_rows // n + (1 if i < total_rows % n else 0) for i in range(n)]
    start = sum(block[:me])
    xr = {r: rank_data((total_rows, 2), r, seed=5) for r in members}
    cr = {r: rank_data((block[i], 2), r, seed=6) for i, r in enumerate(members)}
    summed = sum(xr[r].astype("float64") for r in members)
    gathered = np.concatenate([cr[r] for r in members])
    for op, scale in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / n)):
        y, g = run(lambda x: parallel.reducescatter(x, op=op, process_set=ps), xr[rank], cr[rank])
        assert_close(y, summed[start:start + block[me]] * scale, **TOL, what=f"{tag} reducescatter forward")
        assert_close(g, gathered * scale, **TOL, what=f"{tag} reducescatter gradient")

    # a chain of two collectives, and a collective used twice in one graph
    y, g = run(lambda x: parallel.allreduce(parallel.allgather(x * x, process_set=ps), op=hvd.Sum,
                                            process_set=ps), xs[rank], np.tile(cs[rank], (n, 1)))
    expected = n * np.concatenate([xs[r] ** 2 for r in members])
    assert_close(y, expected, **TOL, what=f"{tag} allgather -> allreduce forward")
    c_all = sum(np.tile(cs[r], (n, 1)).astype("float64") for r in members)  # allreduce backward
    assert_close(g, n * c_all[me * 3:(me + 1) * 3] * 2 * xs[rank], **TOL,
                 what=f"{tag} allgather -> allreduce gradient")
    y, g = run(lambda x: parallel.allreduce(x, op=hvd.Sum, process_set=ps) * parallel.allreduce(
        x, op=hvd.Sum, process_set=ps), xs[rank], cs[rank])
    assert_close(g, 2 * sum(cs[r] * total_x for r in members), rtol=1e-4, atol=1e-4,
                 what=f"{tag} two allreduces of one input")

    # outside autograd.record() they are plain collectives
    assert_close(parallel.allreduce(mx.nd.array(xs[rank]), op=hvd.Sum, process_set=ps), total_x, **TOL,
                 what=f"{tag} allreduce outside record")


def check_replicated_family(ps, tag):
    """Every rank computes the same loss sum(L * c) from replicated tensors."""
    members = ps.ranks
    n = len(members)
    me = members.index(rank)
    k = 2
    shared = rank_data((3, n * k), 0, seed=7)          # replicated on every rank
    c_full = rank_data((3, n * k), 0, seed=8)          # the (replicated) loss's cotangent
    blocks = {r: rank_data((3, k), r, seed=9) for r in members}

    # copy_to_group: each rank uses its block of the copy; the loss is the sum
    # of the ranks' (rank-specific) terms, reduced into the replicated loss.
    def copy_then_shard(x):
        mine = mx.nd.slice_axis(parallel.copy_to_group(x, ps), axis=1, begin=me * k, end=(me + 1) * k)
        return parallel.gather_from_group(mine * mine, ps, axis=-1)
    y, g = run(copy_then_shard, shared, c_full)
    assert_close(y, shared ** 2, **TOL, what=f"{tag} copy_to_group -> gather forward")
    assert_close(g, 2 * shared * c_full, **TOL, what=f"{tag} copy_to_group -> gather gradient")

    # reduce_from_group: partial blocks summed; identity backward
    y, g = run(lambda x: parallel.reduce_from_group(x, ps), blocks[rank], c_full[:, :k])
    assert_close(y, sum(blocks[r].astype("float64") for r in members), **TOL, what=f"{tag} reduce_from_group forward")
    assert_close(g, c_full[:, :k], **TOL, what=f"{tag} reduce_from_group gradient")

    # gather_from_group along the last and a middle axis: backward keeps my block
    y, g = run(lambda x: parallel.gather_from_group(x, ps, axis=-1), blocks[rank], c_full)
    assert_close(y, np.concatenate([blocks[r] for r in members], axis=1), what=f"{tag} gather_from_group forward")
    assert_close(g, c_full[:, me * k:(me + 1) * k], what=f"{tag} gather_from_group gradient")
    cube = {r: rank_data((2, k, 3), r, seed=10) for r in members}
    c_cube = rank_data((2, n * k, 3), 0, seed=11)
    y, g = run(lambda x: parallel.gather_from_group(x, ps, axis=1), cube[rank], c_cube)
    assert_close(y, np.concatenate([cube[r] for r in members], axis=1), what=f"{tag} gather_from_group axis 1")
    assert_close(g, c_cube[:, me * k:(me + 1) * k], what=f"{tag} gather_from_group axis 1 gradient")

    # scatter_to_group: slice forward, gather backward
    def scatter_then_gather(x):
        return parallel.gather_from_group(parallel.scatter_to_group(x, ps, axis=-1) * 3, ps, axis=-1)
    y, g = run(scatter_then_gather, shared, c_full)
    assert_close(y, shared * 3, **TOL, what=f"{tag} scatter_to_group forward")
    assert_close(g, c_full * 3, **TOL, what=f"{tag} scatter_to_group gradient")
    if n > 1:
        raises(ValueError, parallel.scatter_to_group, mx.nd.ones((2, n * k + 1)), ps)


def check_mesh():
    raises(ValueError, parallel.ProcessMesh, size + 1, 1)
    raises(ValueError, parallel.ProcessMesh, 0, size)
    if size > 1:
        # a group the user registered first is found, not registered twice
        mine = hvd.add_process_set([size - 1])
        mesh = parallel.ProcessMesh(size, 1)
        if rank == size - 1:
            assert mesh.mp_set.process_set_id == mine.process_set_id, (mesh.mp_set, mine)
    for dp in [d for d in range(1, size + 1) if size % d == 0]:
        mp = size // dp
        mesh = parallel.ProcessMesh(dp, mp)
        assert (mesh.dp, mesh.mp) == (dp, mp)
        assert mesh.dp_rank == rank // mp and mesh.mp_rank == rank % mp, mesh
        assert mesh.mp_set.ranks == list(range((rank // mp) * mp, (rank // mp) * mp + mp)), mesh.mp_set
        assert mesh.dp_set.ranks == [r for r in range(size) if r % mp == rank % mp], mesh.dp_set
        assert mesh.mp_set.rank() == mesh.mp_rank and mesh.dp_set.rank() == mesh.dp_rank
        if mp == size:
            assert mesh.mp_set is hvd.global_process_set
        if dp == size:
            assert mesh.dp_set is hvd.global_process_set
        again = parallel.ProcessMesh(dp, mp)  # the same groups: no new registration
        assert again.dp_set is mesh.dp_set and again.mp_set is mesh.mp_set
        v = mx.nd.array([float(rank + 1)])
        assert_close(hvd.allreduce(v, op=hvd.Sum, process_set=mesh.mp_set, name=f"mesh{dp}.mp"),
                     [sum(r + 1 for r in mesh.mp_set.ranks)], what=f"allreduce over mp_set of {mesh}")
        assert_close(hvd.allreduce(v, op=hvd.Sum, process_set=mesh.dp_set, name=f"mesh{dp}.dp"),
                     [sum(r + 1 for r in mesh.dp_set.ranks)], what=f"allreduce over dp_set of {mesh}")


rank_set = hvd.global_process_set
check_sum_family(rank_set, "global")
check_replicated_family(rank_set, "global")
if size >= 3:
    sub = hvd.add_process_set([0, size - 1])
    if rank in sub.ranks:
        check_sum_family(sub, "subset")
        check_replicated_family(sub, "subset")
check_mesh()

p = mx.gluon.Parameter("w", shape=(2,))
assert parallel.mark_distributed(p) is p and p.distributed is True
raises(TypeError, parallel.mark_distributed, mx.nd.ones(2))

common.finish()
