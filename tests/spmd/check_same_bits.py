"""The same inputs reduce to the same bits whatever the timing and fusion
(Note [Fixed reduction order] in src/backend/mpi/ordered_reduce.cc).

Twenty rounds over the same per-rank inputs; before each, one rank chosen
at random is held back a little, and every rank enqueues its tensors in an
order of its own, so what arrives first and what is fused with what change
from round to round. Sums are checked bit for bit against NumPy adding the
ranks' inputs in the documented order: rank order within a host, then the
hosts' partial sums in host order where the allreduce is hierarchical (the
argument "hierarchical"), rank order over flat MPI (argument "flat") and
for every reduce-scatter. Every
other call (averages, pre/postscale, in place, grouped, reduce-scatter, a
process set of three ranks) must give round 0's bits in every round. Rank
0 prints "digest <hex>" of all results, for the test to compare launches
run with other fusion thresholds and cycle times."""
import hashlib
import random
import sys
import time

from common import finish, hvd, mx, np, say, start

r, n = start()
ORDER = sys.argv[1]  # "hierarchical" or "flat": the data plane this launch uses
ROUNDS = 20
# "huge" spans pieces of the flat plane's ordered reduction (4 MiB) and of
# the shared-memory one (1 MiB per rank)
SHAPES = {"tiny": (7,), "small": (1000,), "mid": (100_000,), "big": (600_000,), "huge": (1_500_001,),
          "half": (50_000,)}
DTYPES = {"half": "float16"}


def inputs(rank):
    """Mixed magnitudes, so the order of the adds shows in the bits."""
    out = {}
    for i, (name, shape) in enumerate(sorted(SHAPES.items())):
        rng = np.random.RandomState(1000 * i + rank)
        dtype = DTYPES.get(name, "float32")
        scale = np.exp(rng.uniform(-6, 6, size=shape)) if dtype == "float32" else rng.uniform(0.1, 4, size=shape)
        out[name] = (rng.standard_normal(shape) * scale).astype(dtype)
    return out


def placement_groups(members, order):
    """Groups of `members` (ranks) whose sums are made first: their hosts
    where the allreduce is hierarchical, else each rank alone."""
    if order == "flat":
        return [[m] for m in members]
    hosts = {}
    for m in members:
        hosts.setdefault(HOST_OF[m], []).append(m)
    # the hosts in the order of their first rank
    return sorted(hosts.values(), key=lambda g: g[0])


def expected_sum(per_rank, members, order=ORDER):
    def add_up(terms):
        acc = terms[0].copy()
        for t in terms[1:]:
            acc = acc + t
        return acc
    return add_up([add_up([per_rank[m] for m in group]) for group in placement_groups(members, order)])


# which host every rank is on (the ranks' own view of the topology)
hosts_seen = hvd.allgather(mx.nd.array([hvd.cross_rank()], dtype="int32"), name="same_bits.hosts").asnumpy()
HOST_OF = {k: int(h) for k, h in enumerate(hosts_seen)}

ALL = list(range(n))
every = {k: inputs(k) for k in ALL}
mine = every[r]
THREE = hvd.add_process_set([0, 1, 2]) if n >= 4 else None
want = {name: expected_sum({k: every[k][name] for k in ALL}, ALL) for name in SHAPES}
# reduce-scatter adds in rank order on every plane (across hosts it runs
# flat): blocks of several pieces and of unequal rows, and fewer rows than ranks
SCATTERS = {"scatter.wide": ("huge", (1_500_001, 1)), "scatter.rows": ("mid", (1000, 100)),
            "scatter.few": ("tiny", (1, 7))}
rows = {key: np.array_split(expected_sum({k: every[k][name].reshape(shape) for k in ALL}, ALL, "flat"), n)[r]
        for key, (name, shape) in SCATTERS.items()}
want_three = expected_sum({k: every[k]["big"] for k in ALL}, [0, 1, 2]) if THREE and r < 3 else None

first = None  # round 0's results, by call
held_back = random.Random(4321)  # the same choice on every rank: who waits, how long
ORDER_SEED = time.time_ns() ^ r
own_order = random.Random(ORDER_SEED)  # each rank's own enqueue order, new every launch
for round_ in range(ROUNDS):
    late, pause = held_back.randrange(n), held_back.uniform(0.0, 0.02)
    if r == late:
        time.sleep(pause)
    names = sorted(SHAPES)
    own_order.shuffle(names)
    got = {}
    arrays = {name: mx.nd.array(mine[name], dtype=mine[name].dtype) for name in names}
    for name in names:
        got["sum." + name] = hvd.allreduce(arrays[name], op=hvd.Sum, name="sum." + name)
    for name in names:
        got["avg.scaled." + name] = hvd.allreduce(arrays[name], op=hvd.Average, prescale_factor=0.5,
                                                  postscale_factor=3.0, name="avg.scaled." + name)
    together = sorted(SHAPES)  # a group's members are named by position: one order on every rank
    held_back.shuffle(together)
    group = [arrays[name].copy() for name in together]
    hvd.grouped_allreduce_(group, op=hvd.Sum, name="grouped.inplace")
    for name, out in zip(together, group):
        got["grouped." + name] = out
    for key, (name, shape) in SCATTERS.items():
        got[key] = hvd.reducescatter(arrays[name].reshape(shape), op=hvd.Sum, name=key)
    if THREE is not None and r < 3:
        got["three"] = hvd.allreduce(arrays["big"], op=hvd.Sum, name="three", process_set=THREE)
    bits = {key: value.asnumpy() for key, value in got.items()}
    for name in SHAPES:
        for key in ("sum." + name, "grouped." + name):
            assert bits[key].tobytes() == want[name].tobytes(), (
                f"rank {r} round {round_} (order seed {ORDER_SEED}): {key} differs from the inputs added in "
                f"order {ORDER} in {int(np.sum(bits[key] != want[name]))} of {want[name].size} elements")
    for key in SCATTERS:
        assert bits[key].tobytes() == rows[key].tobytes(), f"rank {r} round {round_}: {key}'s bits"
    if want_three is not None:
        assert bits["three"].tobytes() == want_three.tobytes(), f"rank {r} round {round_}: process set's bits"
    if first is None:
        first = bits
    for key, value in bits.items():
        assert value.tobytes() == first[key].tobytes(), (
            f"rank {r} (order seed {ORDER_SEED}): {key} in round {round_} differs from round 0")

digest = hashlib.sha256()
for key in sorted(first):
    digest.update(key.encode() + first[key].tobytes())
if r == 0:
    say(f"digest {digest.hexdigest()}")
finish()
