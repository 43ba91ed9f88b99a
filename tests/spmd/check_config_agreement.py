"""Ranks started with different fusion settings still agree (rank 0's win):
small tensors must be fused, or not, identically everywhere."""
from common import assert_close, finish, hvd, mx, np, start


def main():
    rank, size = start()
    xs = [mx.nd.ones((n,)) * (rank + 1) for n in (3, 50, 700, 20000, 70000)]
    for step in range(3):
        hvd.grouped_allreduce_(xs, name=f"mixed{step}", op=hvd.Sum)
    total = sum(range(1, size + 1)) ** 1
    for x in xs:
        # three in-place sums: each multiplies by `size` after the first
        assert_close(x, np.full(x.shape, total * size ** 2), what=f"tensor of {x.shape[0]}")
    finish()


if __name__ == "__main__":
    main()
