"""A long job's resources stay flat: many small collectives (in place,
allgather, broadcast, unnamed ones whose names are new each time, metric
averages as objects) and grouped ones; after a warm-up, resident memory,
open descriptors and threads stay within 5 % (threads and descriptors:
equal) at every look.

Memory is the anonymous resident set (RssAnon), what a leak grows. The
whole resident set also counts the pages of libmxnet.so and the other
mapped files, which the kernel reads in as code first runs and drops under
memory pressure: 247-273 MB here from run to run, and a CI run's rose by
14 MB (5.3 %) between two looks with no anonymous growth behind it.
The response cache fills over the first 4096 unnamed calls
(MXPLUGIN_CACHE_CAPACITY), about 3 MB, then stays.

A leak grows with the calls; the allocator may also grow once, late: a CI
run here saw the anonymous set rise by 11 MB (7.8 %) between the first two
looks and stay there (glibc maps a new arena when threads contend for a
lock, when the scheduler says), where other runs had the same 11 MB before
the warm-up ended. So every look must stay within twice the slack of the
first, and the second half of each loop, as many calls as the first,
within the slack: a steady leak shows in both halves.

argv: [small collectives] [grouped collectives]; each rank prints the
figures as "resources: ..." for the test's report."""
import os
import sys

from common import finish, hvd, mx, say, start

SMALL = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
GROUPED = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000
LOOKS = 10  # looks after the warm-up, evenly spread
WARM_UP = 0.1  # of each loop: caches, pools and the engine's threads fill first
SLACK = 0.05


def resources():
    with open("/proc/self/status") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith("Rss")}
    return {"anon_mb": kb["RssAnon"] / 1024, "file_mb": kb["RssFile"] / 1024, "fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task"))}


def check(base, now, where, slack=2 * SLACK):
    grew = now["anon_mb"] / base["anon_mb"] - 1
    assert grew <= slack, f"rank {r}: anonymous resident memory grew {grew:.1%} by {where}: {base} -> {now}"
    assert now["fds"] <= base["fds"] and now["threads"] <= base["threads"], \
        f"rank {r}: descriptors or threads grew by {where}: {base} -> {now}"


def middle(looks):
    """The look halfway through the measured part of a loop."""
    ordered = sorted(looks)
    return ordered[len(ordered) // 2]


r, n = start()
small = mx.nd.ones((256,)) * (r + 1)
group = [mx.nd.ones((256,)) for _ in range(50)]
gathered = None
base, peak = None, None
looks = set(int(SMALL * (WARM_UP + (1 - WARM_UP) * k / LOOKS)) for k in range(LOOKS + 1))
half, halfway = middle(looks), None
for i in range(SMALL + 1):
    if i in looks:
        mx.nd.waitall()
        now = resources()
        if base is None:
            base = peak = now
        else:
            check(base, now, f"small collective {i}")
            peak = {k: max(peak[k], now[k]) for k in now}
        if i == half:
            halfway = now
        if i == SMALL:
            check(halfway, now, f"small collective {i} (from the halfway look, call {half})", SLACK)
    kind = i % 20
    if kind == 0:
        gathered = hvd.allgather(small, name="flat.gather")
    elif kind == 1:
        hvd.broadcast_(small, root_rank=i % n, name="flat.bcast")
    elif kind == 2:
        hvd.allreduce(small)  # unnamed: a new name each call
    elif kind == 3 and i % 1000 == 3:
        hvd.broadcast_object({"step": i}, root_rank=0)
        hvd.allreduce(mx.nd.array([float(i)]), name="flat.metric").asnumpy()  # a metric average, read at once
    else:
        hvd.allreduce_(small, name="flat.small", op=hvd.Average)
mx.nd.waitall()
small_figures = f"{SMALL} small: {base} -> peak {peak}"

base = None
looks = set(int(GROUPED * (WARM_UP + (1 - WARM_UP) * k / LOOKS)) for k in range(LOOKS + 1))
half, halfway = middle(looks), None
for i in range(GROUPED + 1):
    if i in looks:
        mx.nd.waitall()
        now = resources()
        if base is None:
            base = peak = now
        else:
            check(base, now, f"grouped collective {i}")
            peak = {k: max(peak[k], now[k]) for k in now}
        if i == half:
            halfway = now
        if i == GROUPED:
            check(halfway, now, f"grouped collective {i} (from the halfway look, call {half})", SLACK)
    hvd.grouped_allreduce_(group, name="flat.group", op=hvd.Average)
mx.nd.waitall()
assert gathered is not None and gathered.shape == (256 * n,)
say(f"resources: rank {r}: {small_figures}; {GROUPED} grouped of 50: {base} -> peak {peak}")
finish()
