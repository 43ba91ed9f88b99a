"""The fake-host launch of tests/fake_hosts.py, with no GPU: every rank is a
host of its own to MPI (local_rank 0, local_size 1, cross_rank = rank), sees
its own NCCL_HOSTID (so NCCL would see separate nodes) and sockets on
loopback, and the ranks still reach each other (a CPU allreduce and an
allgather of the host ids). Raw core, no MXNet: runs in a core-only build."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from mxplugin._loader import core_module as m  # noqa: E402

ID_BYTES = 32  # host ids travel as fixed-width, zero-padded bytes

core = m.Core()
topo = core.topology()
rank, size = topo["rank"], topo["size"]
want = dict(local_rank=0, local_size=1, cross_rank=rank, cross_size=size)
got = {k: topo[k] for k in want}
assert got == want, f"rank {rank}: topology {got}, expected {want} (one rank per fake host)"
host_id = os.environ.get("NCCL_HOSTID", "")
assert host_id and len(host_id) <= ID_BYTES, f"rank {rank}: NCCL_HOSTID={host_id!r}: the fake ssh did not set it"
assert os.environ.get("NCCL_SOCKET_IFNAME") == "lo", f"rank {rank}: NCCL_SOCKET_IFNAME is not lo"

mine = np.zeros(ID_BYTES, dtype="int8")
mine[:len(host_id)] = np.frombuffer(host_id.encode(), dtype="int8")
every = np.zeros(ID_BYTES * size, dtype="int8")
total = np.full(1000, rank + 1, dtype="float32")
handle = core.enqueue([
    m.Op("fake.ids", m.OP_ALLGATHER, m.DTYPES["int8"], [ID_BYTES], mine.ctypes.data, every.ctypes.data,
         out_shape=[every.size]),
    m.Op("fake.sum", m.OP_ALLREDUCE, m.DTYPES["float32"], [total.size], total.ctypes.data, total.ctypes.data),
], 0)
handle.wait()
ids = [bytes(every[i * ID_BYTES:(i + 1) * ID_BYTES]).rstrip(b"\0").decode() for i in range(size)]
assert len(set(ids)) == size, f"rank {rank}: host ids {ids} are not one per rank"
np.testing.assert_array_equal(total, np.full(1000, size * (size + 1) / 2, dtype="float32"))
core.shutdown()
sys.stdout.write(f"PASS {rank}\n")
