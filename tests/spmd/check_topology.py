"""Topology as mxplugin reports it, against the host list the ranks were
launched on: check_topology.py SLOTS,SLOTS,... (ranks per host, in host
order; ranks fill hosts in order). Also one allreduce across every host."""
import sys

from common import finish, hvd, mx, np, start

r, n = start()
slots = [int(s) for s in sys.argv[1].split(",")]
host, first = 0, 0
while r >= first + slots[host]:
    first, host = first + slots[host], host + 1
want = dict(local_rank=r - first, local_size=slots[host], cross_rank=host,
            cross_size=sum(1 for s in slots if s > r - first))
got = dict(local_rank=hvd.local_rank(), local_size=hvd.local_size(), cross_rank=hvd.cross_rank(),
           cross_size=hvd.cross_size())
assert got == want, f"rank {r}: topology {got}, expected {want}"
out = hvd.allreduce(mx.nd.ones((1000,)) * (r + 1), op=hvd.Sum, name="across.hosts")
np.testing.assert_allclose(out.asnumpy(), np.full(1000, n * (n + 1) / 2))
finish()
