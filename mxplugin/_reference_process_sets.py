"""The API reference sections of ProcessSet, global_process_set,
add_process_set and remove_process_set, by name (_reference_basics
attaches them, with the other basic functions')."""

_START = """>>> import mxplugin as hvd
>>> hvd.init()"""

_NOT_INITIALIZED = """NotInitializedError
    Before ``init()``, or after ``shutdown()``."""

PROCESS_SETS = {}

PROCESS_SETS["ProcessSet"] = """
Its attributes: ``ranks`` (the sorted global ranks) and ``process_set_id``
(None until registered, 0 for ``global_process_set``).

Horovod: ``hvd.ProcessSet``, from a list of ranks; an mpi4py communicator,
which Horovod also takes, is refused here (``mpi_comm`` is always None).

Parameters
----------
ranks_or_comm : list of int
    The global ranks of the set, in any order (kept sorted); they must be
    distinct and in ``[0, size())`` (``add_process_set`` checks).

Raises
------
ArgumentError
    When ``ranks_or_comm`` is not a list of integers (an mpi4py
    communicator included).

Examples
--------
>>> import mxnet as mx
>>> import mxplugin as hvd
>>> hvd.init()
>>> first = hvd.ProcessSet([0])
>>> print(first.size())  # not registered yet
None
>>> first = hvd.add_process_set(first)  # on every rank, members or not
>>> first.size(), first.included() == (hvd.rank() == 0)
(1, True)
>>> if first.included():  # only the members call the set's collectives
...     total = hvd.allreduce(mx.nd.ones(2), op=hvd.Sum, process_set=first).asnumpy()
>>> hvd.remove_process_set(first)
True
"""

PROCESS_SETS["ProcessSet.size"] = """
Returns
-------
int or None
    ``len(ranks)``; None while the set is not registered.
"""

PROCESS_SETS["ProcessSet.rank"] = """
Returns
-------
int or None
    This process's position in ``ranks`` (0 for the set's lowest global
    rank); None while the set is not registered. Collectives' ``root_rank``
    is a global rank even on a set: this one is for reading the results of
    ``allgather`` and the like.

Raises
------
ArgumentError
    When this process is not a member of the registered set.
"""

PROCESS_SETS["ProcessSet.included"] = f"""
Returns
-------
bool
    Whether ``rank()`` is one of ``ranks`` (registered or not).

Raises
------
{_NOT_INITIALIZED}
"""

PROCESS_SETS["global_process_set"] = f"""
The ProcessSet of every rank, which every collective takes by default
(``process_set=global_process_set``). Its id is 0; ``init()`` fills in its
ranks. It cannot be removed.

Horovod: ``hvd.global_process_set``, same.

Examples
--------
{_START}
>>> hvd.global_process_set.ranks == list(range(hvd.size()))
True
>>> hvd.global_process_set.process_set_id, hvd.global_process_set.size()
(0, 2)
"""

PROCESS_SETS["add_process_set"] = f"""
Horovod: ``hvd.add_process_set``, same argument. Horovod adds sets after
``init()`` only when started with ``init(process_sets="dynamic")``
(``HOROVOD_DYNAMIC_PROCESS_SETS=1``); here they may always be added (and
``"dynamic"`` is accepted). A set with the same ranks as a registered one
raises ArgumentError here, where Horovod returns it unregistered.

Parameters
----------
process_set : ProcessSet or list of int
    The set to register, or its global ranks (a ProcessSet is made of them).

Returns
-------
ProcessSet
    The set, with its ``process_set_id`` set: pass it as ``process_set=``.

Raises
------
ArgumentError
    When the ranks are not distinct integers in ``[0, size())``, the set is
    already registered, or a registered set has the same ranks.
{_NOT_INITIALIZED}

Examples
--------
>>> import mxnet as mx
>>> import mxplugin as hvd
>>> hvd.init()
>>> alone = [hvd.add_process_set([r]) for r in range(hvd.size())]  # a set per rank, added on every rank
>>> own = alone[hvd.rank()]
>>> own.ranks == [hvd.rank()], own.rank()
(True, 0)
>>> hvd.allgather(mx.nd.ones((1, 2)), process_set=own).asnumpy().tolist()
[[1.0, 1.0]]
>>> [hvd.remove_process_set(s) for s in alone]
[True, True]
"""

PROCESS_SETS["remove_process_set"] = f"""
Horovod: ``hvd.remove_process_set``, same argument and result. Here a set
that is not registered returns False (Horovod asserts), and a removed set
keeps its ranks, so that it can be added again.

Parameters
----------
process_set : ProcessSet
    A set that ``add_process_set`` (or ``init(process_sets=...)``) registered.

Returns
-------
bool
    True when the set was removed; False for ``global_process_set`` and for
    a set that is not registered (nothing happens then, and no other rank
    is waited for). A removed set's ``process_set_id`` is None again;
    collectives still pending on it fail.

Raises
------
TypeError
    When `process_set` is not a ProcessSet (its list of ranks, say).
{_NOT_INITIALIZED}

Examples
--------
{_START}
>>> first = hvd.add_process_set([0])
>>> hvd.remove_process_set(first)
True
>>> print(first.process_set_id)
None
>>> hvd.remove_process_set(first)  # not registered any more
False
>>> hvd.remove_process_set(hvd.global_process_set)
False
"""
