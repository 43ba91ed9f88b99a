"""Start-up, topology, process sets, timeline and build information."""
import atexit
import threading

from mxplugin.errors import ArgumentError, NotInitializedError


class _State:
    """The process's one Core, created by init(). Held here, not in C++
    globals, so the core itself stays an ordinary object."""

    def __init__(self):
        self.core = None
        self.topology = None
        self.lock = threading.Lock()
        self.shut_down = False


_state = _State()


def _core():
    core = _state.core
    if core is None:
        raise NotInitializedError("mxplugin has not been initialized; call mxplugin.init() first.")
    return core


def _core_module():
    from mxplugin._loader import core_module

    return core_module


class ProcessSet:
    """A subset of ranks that collectives can run on (`process_set=` argument).

    Create it with the global ranks it holds, then register it on every rank
    with add_process_set() (or pass it to init(process_sets=[...]))."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ArgumentError("ProcessSet takes a list of integer ranks; MPI communicators are not supported")
        if not all(isinstance(r, int) for r in ranks):
            raise ArgumentError(f"ProcessSet ranks must be integers, got {ranks_or_comm!r}")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """Number of ranks, or None until the set is registered."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None until registered.
        Raises ValueError if this process is not a member."""
        if self.process_set_id is None:
            return None
        r = _core().process_set_rank(self.process_set_id)
        if r < 0:
            raise ArgumentError(f"rank {rank()} is not a member of {self}")
        return r

    def included(self):
        """Whether this process is a member (None while ranks are unknown)."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def init(comm=None, process_sets=None):
    """Starts mxplugin on this process. Call once per process, on every rank.

    comm: None (all ranks launched by mpiexec/mxplugin-run) or the list of all
        ranks. process_sets: ProcessSet objects to register now, or "dynamic"."""
    with _state.lock:
        if _state.core is not None:
            return
        if _state.shut_down:
            raise ArgumentError("mxplugin cannot be initialized again after shutdown() (MPI cannot restart)")
        core = _core_module().Core()
        topo = core.topology()
        if comm is not None:
            try:
                ranks = sorted(comm)
            except TypeError:
                raise ArgumentError("init(comm=...) takes None or a list of ranks")
            if ranks != list(range(topo["size"])):
                core.shutdown()
                raise NotImplementedError(
                    "init(comm=...) with a subset of the launched ranks is not supported; "
                    "launch only the ranks you need, or use process sets")
        _state.core = core
        _state.topology = topo
        global_process_set.ranks = list(range(topo["size"]))
    atexit.register(_shutdown_at_exit)
    if process_sets is not None and not isinstance(process_sets, str):
        for ps in process_sets:
            add_process_set(ps)


def _shutdown_at_exit():
    """shutdown() as the interpreter exits. When another rank stopped first
    (it failed, or exited before this rank), the core is already down and
    says why; that is one line of news, not an 'Exception ignored in atexit
    callback' traceback."""
    try:
        shutdown()
    except Exception as exc:  # noqa: BLE001 -- nothing may escape an atexit hook
        import sys

        sys.stderr.write(f"mxplugin: rank {_state.topology['rank'] if _state.topology else '?'} shut down: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n")


def shutdown():
    """Stops the background thread; all ranks stop together. Collectives still
    pending (on any rank) fail with an error saying so: read the results you
    need (asnumpy(), mx.nd.waitall()) before shutting down."""
    with _state.lock:
        core = _state.core
        if core is None:
            return
        _state.core = None
        _state.shut_down = True
    core.shutdown()


def is_initialized():
    return _state.core is not None


def _topology(key):
    _core()
    return _state.topology[key]


def size():
    """Number of ranks."""
    return _topology("size")


def rank():
    """This process's rank, in [0, size())."""
    return _topology("rank")


def local_size():
    """Number of ranks on this machine."""
    return _topology("local_size")


def local_rank():
    """This process's rank among the ranks on this machine."""
    return _topology("local_rank")


def cross_size():
    """Number of machines that have a rank with this local_rank."""
    return _topology("cross_size")


def cross_rank():
    """Index of this machine among those."""
    return _topology("cross_rank")


def mpi_threads_supported():
    """Whether MPI was initialised with MPI_THREAD_MULTIPLE."""
    return _topology("threads_multiple")


def mpi_enabled():
    return True


def mpi_built():
    return True


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    """NCCL version code compiled in (0 when built without NCCL), as Horovod."""
    return _core_module().nccl_built()


def cuda_built():
    return _core_module().cuda_built()


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (open it in chrome://tracing or Perfetto)."""
    _core().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    _core().stop_timeline()


def add_process_set(process_set):
    """Registers a process set; a collective call: every rank must make it, in
    the same order. Returns the ProcessSet with its id set."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ArgumentError(f"{process_set} is already registered")
    process_set.process_set_id = _core().add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Unregisters a process set (collective). Returns False for the global
    set or a set that is not registered."""
    if process_set.process_set_id in (None, 0):
        return False
    removed = _core().remove_process_set(process_set.process_set_id)
    process_set._invalidate()
    return removed
