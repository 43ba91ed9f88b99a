"""The API reference of the start-up, topology, timeline and build queries
(and, from _reference_process_sets, of the process sets). Each of these
public names keeps its summary as its docstring where it is defined; its
reference sections (Horovod's equivalent, Parameters, Returns, Raises,
Examples) are kept apart, so that the code stays short to read, and
`complete` attaches them. Together they are what the reference page shows."""
import inspect

from mxplugin._reference_process_sets import PROCESS_SETS

_START = """>>> import mxplugin as hvd
>>> hvd.init()"""

_NOT_INITIALIZED = """NotInitializedError
    Before ``init()``, or after ``shutdown()``."""


def _built(horovod, value, meaning):
    """The sections of a build query that returns `value` (a constant)."""
    return f"""
Horovod: ``hvd.{horovod}``, same; here always {value}.

Returns
-------
bool
    {meaning}

Examples
--------
>>> import mxplugin as hvd
>>> hvd.{horovod}()
{value}
"""


def _topology(horovod, meaning, example, kind="int"):
    """The sections of a query of what init() learnt (an int of this rank's, or a bool)."""
    return f"""
Horovod: ``hvd.{horovod}``, same; before ``init()`` both raise a ValueError
(here NotInitializedError, a ValueError).

Returns
-------
{kind}
    {meaning}

Raises
------
{_NOT_INITIALIZED}

Examples
--------
{_START}
{example}
"""


SECTIONS = dict(PROCESS_SETS)

SECTIONS["shutdown"] = """
Horovod: ``hvd.shutdown``, same; it also runs by itself as the interpreter
exits. Here ``init()`` cannot follow it: it raises ArgumentError (MPI
cannot start again in the process).

Examples
--------
>>> import mxplugin as hvd
>>> hvd.init()
>>> hvd.shutdown()
>>> hvd.is_initialized()
False
>>> hvd.shutdown()  # again: nothing happens
>>> try:
...     hvd.rank()
... except hvd.NotInitializedError as e:
...     print(e)
mxplugin has not been initialized; call mxplugin.init() first.
"""

SECTIONS["is_initialized"] = """
Horovod: ``hvd.is_initialized``, same.

Returns
-------
bool
    True between ``init()`` and ``shutdown()``.

Examples
--------
>>> import mxplugin as hvd
>>> if not hvd.is_initialized():
...     hvd.init()
>>> hvd.is_initialized()
True
"""

SECTIONS["size"] = _topology("size", "The number of ranks of the job, at least 1.", """\
>>> hvd.size()
2
>>> learning_rate = 0.1 * hvd.size()  # scaled for the combined batch""")

SECTIONS["rank"] = _topology("rank", "This process's rank, in ``[0, size())``; rank 0 is the usual root.", """\
>>> 0 <= hvd.rank() < hvd.size()
True
>>> hvd.allgather_object(hvd.rank())  # each rank has its own
[0, 1]""")

SECTIONS["local_size"] = _topology(
    "local_size", "The number of ranks on this machine (sharing its memory), at least 1.", """\
>>> 1 <= hvd.local_size() <= hvd.size()
True""")

SECTIONS["local_rank"] = _topology(
    "local_rank", "This process's rank among the ranks on its machine, in ``[0, local_size())``: the usual "
    "choice of GPU.", """\
>>> import mxnet as mx
>>> 0 <= hvd.local_rank() < hvd.local_size()
True
>>> ctx = mx.gpu(hvd.local_rank()) if mx.context.num_gpus() else mx.cpu()""")

SECTIONS["cross_size"] = _topology(
    "cross_size", "The number of machines with a rank of this process's ``local_rank()`` (with as many ranks "
    "on every machine: the number of machines).", """\
>>> hvd.cross_size() * hvd.local_size() == hvd.size()  # every machine runs as many ranks
True""")

SECTIONS["cross_rank"] = _topology(
    "cross_rank", "The index of this process's machine among those, in ``[0, cross_size())``.", """\
>>> 0 <= hvd.cross_rank() < hvd.cross_size()
True""")

SECTIONS["mpi_threads_supported"] = _topology(
    "mpi_threads_supported", "True unless ``MXPLUGIN_MPI_THREADS=funneled`` (or Horovod's "
    "``HOROVOD_MPI_THREADS_DISABLE=1``) is set; when False, other libraries (mpi4py) must not call MPI while "
    "mxplugin runs.", """\
>>> isinstance(hvd.mpi_threads_supported(), bool)
True""", kind="bool")

SECTIONS["mpi_enabled"] = _built("mpi_enabled", True, "True: MPI carries the negotiation of every collective "
                                                      "and the data of host arrays.")
SECTIONS["mpi_built"] = _built("mpi_built", True, "True: mxplugin is always built with MPI.")
SECTIONS["gloo_enabled"] = _built("gloo_enabled", False, "False: mxplugin has no Gloo controller.")
SECTIONS["gloo_built"] = _built("gloo_built", False, "False: mxplugin is never built with Gloo.")
SECTIONS["ddl_built"] = _built("ddl_built", False, "False: mxplugin has no IBM DDL support.")
SECTIONS["ccl_built"] = _built("ccl_built", False, "False: mxplugin has no oneCCL support.")
SECTIONS["rocm_built"] = _built("rocm_built", False, "False: mxplugin has no ROCm build.")

SECTIONS["nccl_built"] = """
Horovod: ``hvd.nccl_built``, same (an int there too). It needs no ``init()``.

Returns
-------
int
    NCCL's version code (major * 10000 + minor * 100 + patch: 21805 for
    NCCL 2.18.5), or 0 when this build has no NCCL.

Examples
--------
>>> import mxplugin as hvd
>>> version = hvd.nccl_built()
>>> isinstance(version, int) and version >= 0
True
"""

SECTIONS["cuda_built"] = """
Horovod: ``hvd.cuda_built``, same. It needs no ``init()``.

Returns
-------
bool
    Whether this build has its CUDA kernels.

Examples
--------
>>> import mxplugin as hvd
>>> isinstance(hvd.cuda_built(), bool)
True
"""

_TIMELINE_EXAMPLE = """>>> import json, os, tempfile
>>> import mxnet as mx
>>> import mxplugin as hvd
>>> hvd.init()
>>> with tempfile.TemporaryDirectory() as folder:
...     path = os.path.join(folder, "timeline-{rank}.json")  # a file per rank
...     hvd.start_timeline(path, mark_cycles=True)
...     total = hvd.allreduce(mx.nd.ones(4), name="timeline.example").asnumpy()
...     hvd.stop_timeline()
...     with open(path.format(rank=hvd.rank())) as f:
...         events = json.load(f)
>>> sorted({e["name"] for e in events} & {"NEGOTIATE", "ALLREDUCE", "CYCLE_START"})
['ALLREDUCE', 'CYCLE_START', 'NEGOTIATE']"""

SECTIONS["start_timeline"] = f"""
Not a collective: each rank's call governs its own file. With one path
for every rank, rank 0 alone writes it (as Horovod does); ``{{rank}}`` in
the path gives each rank a file of its own. A timeline already running is
closed first. The file can also be started at ``init()`` by
``MXPLUGIN_TIMELINE`` (or ``HOROVOD_TIMELINE``) set to its path.

Horovod: ``hvd.start_timeline``, same arguments. Horovod needs
``HOROVOD_TIMELINE=DYNAMIC`` set before ``init()`` for it; mxplugin does
not, and ``{{rank}}`` is mxplugin's.

Parameters
----------
file_path : str or os.PathLike
    The JSON file to write (overwritten), on the rank's machine.
mark_cycles : bool, default False
    Also marks each cycle of the background thread (``CYCLE_START``
    events), as ``HOROVOD_TIMELINE_MARK_CYCLES`` does.

Raises
------
ArgumentError
    When the file cannot be opened for writing (on a rank that writes one).
{_NOT_INITIALIZED}

Examples
--------
{_TIMELINE_EXAMPLE}
"""

SECTIONS["stop_timeline"] = f"""
Nothing happens when no timeline is running. ``shutdown()`` stops it too.

Horovod: ``hvd.stop_timeline``, same.

Raises
------
{_NOT_INITIALIZED}

Examples
--------
>>> import os, tempfile
>>> import mxplugin as hvd
>>> hvd.init()
>>> with tempfile.TemporaryDirectory() as folder:
...     path = os.path.join(folder, "timeline.json")  # one path: rank 0 writes it
...     hvd.start_timeline(path)
...     hvd.stop_timeline()
...     written = os.path.exists(path)
>>> written == (hvd.rank() == 0)
True
>>> hvd.stop_timeline()  # none running: nothing happens
"""


def complete(namespace):
    """Completes the docstring (the summary) of each name of SECTIONS in
    `namespace` (a module's globals; "Class.method" for a method) with its
    sections. An object that is neither a function nor a class
    (global_process_set, a ProcessSet) takes the text whole, as its own."""
    for name, sections in SECTIONS.items():
        owner, _, member = name.rpartition(".")
        obj = getattr(namespace[owner], member) if owner else namespace[name]
        if not (inspect.isroutine(obj) or inspect.isclass(obj)):
            obj.__doc__ = inspect.cleandoc(sections) + "\n"
            continue
        summary = inspect.cleandoc(obj.__doc__ or "")
        obj.__doc__ = f"{summary}\n\n{inspect.cleandoc(sections)}\n"
