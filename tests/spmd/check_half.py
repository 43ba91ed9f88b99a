"""float16 scaling and sums against NumPy's float32-then-round reference, on
awkward values (subnormals, near max, infinities) and odd lengths, through
the raw core entry (vectorised F16C path and its scalar tail)."""
from common import finish, hvd, np, start

from mxplugin._loader import core_module as m


def values(n, seed):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-2, 2, n).astype(np.float16)
    x[::7] = np.float16(6.0e-8)      # subnormal
    x[1::11] = np.float16(65000.0)   # near the maximum
    x[2::13] = np.float16(-np.inf)
    x[3::17] = np.float16(3.1e-5)
    return x


def main():
    rank, size = start()
    core = hvd.basics._core()
    for n in (1, 7, 8, 1023, 1025, 5000):
        for pre, post in ((0.5, 1.0), (1.0, 0.25), (0.1, 3.0)):
            mine = values(n, rank)
            out = np.zeros_like(mine)
            name = f"half.{n}.{pre}.{post}"
            core.enqueue([m.Op(name, m.OP_ALLREDUCE, m.DTYPES["float16"], [n], mine.ctypes.data, out.ctypes.data,
                               prescale=pre, postscale=post)], 0).wait()
            # reference: each rank's prescale rounded to half, sums rounded pairwise in rank order
            # (MPI's order may differ for 3+ ranks; compare with a tolerance of one half ulp per add)
            scaled = [(values(n, r).astype(np.float32) * np.float32(pre)).astype(np.float16) for r in range(size)]
            acc = scaled[0]
            for s in scaled[1:]:
                acc = (acc.astype(np.float32) + s.astype(np.float32)).astype(np.float16)
            ref = (acc.astype(np.float32) * np.float32(post)).astype(np.float16)
            same_inf = np.isinf(ref) == np.isinf(out)
            assert same_inf.all(), f"{name}: infinities differ"
            finite = ~np.isinf(ref)
            if size == 1:  # one rounding per step, same as NumPy: bit-exact
                np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16), err_msg=name)
            np.testing.assert_allclose(out[finite].astype(np.float32), ref[finite].astype(np.float32),
                                       rtol=2e-3 * size, atol=1e-7, err_msg=name)
    finish()


if __name__ == "__main__":
    main()
