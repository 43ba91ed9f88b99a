"""join(): a rank that has run out of data stands in for the others'
collectives until every rank has joined (Note [Joined ranks] in
src/core/message_table.cc). A DistributedTrainer's way is join_when_done
(mxplugin/training/join.py)."""
import mxnet as mx
import numpy as np

from mxplugin import basics, calls, host_exchange
from mxplugin._reference_ops import reference
from mxplugin.basics import global_process_set
from mxplugin.functions import allgather_object

JOIN_NAME = "mxplugin.join"


@reference("join")
def join(device=-1, process_set=global_process_set):
    """This rank has run out of data: blocks until every rank of the set has
    called join(), and returns the global rank that called it last.

    Meanwhile this rank takes part in the others' collectives as Horovod's
    join does: with zeros in their allreduces and reducescatters (Average
    still divides by the set's size), with no rows in their allgathers,
    receiving their broadcasts, in their barriers. Calls a joined rank
    cannot take part in fail at once on the ranks that made them, naming
    the joined ranks: an alltoall, a broadcast from a joined root, GPU
    tensors, adding or removing a process set, DistributedTrainer's
    save_states() of gathered states. A DistributedTrainer averages over
    the ranks still training only under ``join_when_done``."""
    del device
    mx.nd.waitall()  # this rank's own collectives first: they are not stood in for
    m = calls.core_module()
    last = np.full(1, -1, dtype=np.int32)
    op = m.Op(JOIN_NAME, m.OP_JOIN, m.DTYPES["int32"], [1], 0, last.ctypes.data)
    basics._core().enqueue([op], calls.set_id(process_set)).wait()
    _agree_on_auto_names(process_set)
    host_exchange.forget()  # the joined ranks missed calls: choose paths afresh alike
    return int(last[0])


def _agree_on_auto_names(process_set):
    """The joined ranks stood in for calls they did not make, so their auto
    names (calls.base_name) fell behind the others': every member takes the
    highest count of each kind. Collective over the set."""
    number = getattr(process_set, "process_set_id", None)
    mine = {kind: n for (kind, set_number), n in calls._counters.items() if set_number == number}
    for theirs in allgather_object(mine, name="mxplugin.join.names", process_set=process_set):
        for kind, n in theirs.items():
            calls._counters[(kind, number)] = max(calls._counters.get((kind, number), 0), n)
