"""Start-up, topology, process sets, timeline and build information."""
import atexit
import os
import signal
import sys
import threading

from mxplugin import _reference_basics, horovod_variables, lone_rank
from mxplugin.docstrings import documented
from mxplugin.errors import ArgumentError, NotInitializedError
from mxplugin_run import phases
from mxplugin_run.protocol import ENV_DRIVER, LOST_PEERS_MARKER, RELAYED


class _State:
    """The process's one Core, created by init(). Held here, not in C++
    globals, so the core itself stays an ordinary object."""

    def __init__(self):
        self.core = None
        self.topology = None
        self.lock = threading.Lock()
        self.shut_down = False
        self.interrupted = False  # this process got SIGINT (Note [Interrupted ranks end with a code])


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
    """A subset of the ranks that collectives can run on (their `process_set`
    argument). Make it of the global ranks it holds, then register it on
    every rank with add_process_set() (or pass it to init(process_sets=[...]))."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, "Get_rank"):  # an mpi4py communicator (Horovod takes them)
            raise ArgumentError("ProcessSet takes a list of integer ranks; MPI communicators are not supported")
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ArgumentError(f"ProcessSet takes a list of integer ranks, got {ranks_or_comm!r} "
                                f"({type(ranks_or_comm).__name__})") from None
        if not all(isinstance(r, int) for r in ranks):
            raise ArgumentError(f"ProcessSet ranks must be integers, got {ranks_or_comm!r}")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set (the global set's: NotInitializedError before init())."""
        if self.process_set_id is None:
            return None
        if self.process_set_id == 0:
            _core()
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set."""
        if self.process_set_id is None:
            return None
        r = _core().process_set_rank(self.process_set_id)
        if r < 0:
            raise ArgumentError(f"rank {rank()} is not a member of {self}")
        return r

    def included(self):
        """Whether this process is a member of the set."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


@documented("comm", "process_sets", horovod="``hvd.init``, same arguments.",
           example=[">>> import mxplugin as hvd", ">>> hvd.init()", ">>> 0 <= hvd.rank() < hvd.size()", "True"])
def init(comm=None, process_sets=None):
    """Starts mxplugin on this process: call it once, on every rank, before
    any collective (again: nothing happens; after shutdown(): refused)."""
    with _state.lock:
        if _state.core is not None:
            return
        if _state.shut_down:
            raise ArgumentError("mxplugin cannot be initialized again after shutdown() (MPI cannot restart)")
        ignored = horovod_variables.apply(os.environ)  # Note [Horovod's variables]
        core = _start_core()
        topo = core.topology()
        horovod_variables.warn(ignored, topo["rank"])
        lone_rank.refuse_a_lone_rank(core, topo["size"])  # Note [Lone ranks]
        if comm is not None:
            ranks = _ranks_of(comm, topo)
            if ranks != list(range(topo["size"])):
                core.shutdown()
                raise NotImplementedError(
                    f"init(comm=...) with a subset of the launched ranks ({ranks} of {topo['size']}) is not "
                    "supported; launch only the ranks you need, or use process sets")
        _state.core = core
        _state.topology = topo
        global_process_set.ranks = list(range(topo["size"]))
    atexit.register(_shutdown_at_exit)
    _notice_interrupts()
    if os.environ.get(RELAYED):  # beside mxplugin-run's rank agent, which reads these lines
        core.say_lost_peers(LOST_PEERS_MARKER)  # Note [Lost peers as data]
    if process_sets is not None and not isinstance(process_sets, str):
        for ps in process_sets:
            add_process_set(ps)


def _start_core():
    """The core, started (MPI's start among it). In an elastic launch the
    launcher is watched meanwhile: a rank whose world breaks while MPI
    starts leaves (Note [Leaving MPI's start] in mxplugin/elastic/start_guard.py)."""
    guard = None
    if os.environ.get(ENV_DRIVER):
        import mxplugin.elastic.start_guard as start_guard

        guard = start_guard.guard_start()
    try:
        core = _core_module().Core()
    finally:
        if guard is not None:
            guard.end()
    phases.tell(phases.RUNNING)  # MPI's start is over: Note [A rank's agent] in mxplugin_run/rank_agent.py
    return core


def _ranks_of(comm, topo):
    """The global ranks of init()'s `comm`: a list of ranks, or an mpi4py
    communicator (its members' world ranks, through its group)."""
    if hasattr(comm, "Get_group") and hasattr(comm, "Get_size"):
        from mpi4py import MPI  # the communicator is mpi4py's: it is loaded

        world = MPI.COMM_WORLD.Get_group()
        try:
            return sorted(MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())), world))
        finally:
            world.Free()
    try:
        return sorted(comm)
    except TypeError:
        raise ArgumentError(f"init(comm=...) takes None, a list of ranks or an mpi4py communicator, not "
                            f"{type(comm).__name__}") from None


def _shutdown_at_exit():
    """shutdown() as the interpreter exits. When another rank stopped first
    (it failed, or exited before this rank), the core is already down and
    says why; that is one line of news, not an 'Exception ignored in atexit
    callback' traceback. A rank that an interrupt ends then ends with an
    exit code (Note [Interrupted ranks end with a code])."""
    who = f"mxplugin: rank {_state.topology['rank'] if _state.topology else '?'}"
    try:
        shutdown()
    except Exception as exc:  # noqa: BLE001 -- nothing may escape an atexit hook
        sys.stderr.write(f"{who} shut down: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n")
    if not _ending_by_interrupt():
        return
    _forget_collectives_failed_by_the_stop(who)
    if _state.topology and _state.topology["size"] > 1:
        if ENV_DRIVER not in os.environ:  # not an elastic rank (its agent reports the signal)
            _core_module().exit_at_end(128 + signal.SIGINT)


def _forget_collectives_failed_by_the_stop(who):
    """After an interrupt, collectives still pending when the core stopped
    (pushed when the KeyboardInterrupt came, never read) have failed with its
    "shut down" error. MXNet's own atexit hook, which waits for all, would
    print that as "Exception ignored in atexit callback: _notify_shutdown":
    noise after a Ctrl-C. So it is waited for here, and dropped; another
    failure still gets its first line."""
    mx = sys.modules.get("mxnet")
    if mx is None or not hasattr(mx, "nd"):
        return
    try:
        mx.nd.waitall()
    except Exception as exc:  # noqa: BLE001 -- nothing may escape an atexit hook
        first = str(exc).replace("MXNetError: ", "", 1).strip().splitlines()[0] if str(exc).strip() else ""
        if not first.startswith("mxplugin"):
            sys.stderr.write(f"{who}: an MXNet operation failed: {first or type(exc).__name__}\n")


# Note [Interrupted ranks end with a code]: CPython ends a program stopped by
# a KeyboardInterrupt that nobody caught by killing itself with SIGINT once
# it has finalised, so that a shell sees the Ctrl-C. MPICH's launcher takes
# a rank that ends by a signal for a crash and SIGKILLs the job's other
# ranks at once: when it reaps that rank, and when the rank's PMI connection
# closes unfinalised (MPICH sends PMI finalize from an exit handler, which a
# death by signal skips). After a Ctrl-C every rank ends that way, each once
# its own clean-up is done (all ranks stop together in shutdown(); what
# follows is each rank's own: atexit handlers registered before init(),
# MXNet's, files and output flushed as the interpreter finalises), so the
# first rank to end killed the others in the middle of theirs. mpiexec ORs
# the ranks' raw wait statuses: 2 | 9 = 11, reported as a "Segmentation
# fault", or 2 when the PMI path came first (it presets the statuses of the
# ranks it kills to 0: killed all the same). So a rank of a job of several
# that an interrupt ends calls exit(128 + SIGINT) where it would have killed
# itself: exit handlers run, MPICH sees an orderly end and kills nobody, and
# mpiexec exits 130, as a shell reports a Ctrl-C. Ended by an interrupt: by
# a KeyboardInterrupt nobody caught, or by any uncaught exception once the
# process got SIGINT (a KeyboardInterrupt raised inside a destructor, as
# NDArray's, is swallowed; the rank then fails at its next collective, which
# the other ranks' stop has ended; it would exit 1, and mpiexec's OR make
# 131). A one-process run keeps CPython's way (its parent may be a shell),
# and so does an elastic rank, whose agent reports the signal itself and
# exits with a code (Note [A rank's agent] in mxplugin_run/rank_agent.py).


def _notice_interrupts():
    """Has SIGINT remembered (_state.interrupted) while Python's own handler
    still raises KeyboardInterrupt; only where that handler is in place (a
    program's own stays as it is), and only from the main thread."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def on_interrupt(signum, frame):
        _state.interrupted = True
        signal.default_int_handler(signum, frame)

    try:
        signal.signal(signal.SIGINT, on_interrupt)
    except ValueError:  # not the main thread
        pass


def _ending_by_interrupt():
    """Whether an interrupt ends this interpreter: an exception nobody caught
    (CPython prints it, keeping it as sys.last_value and sys.last_exc, before
    it finalises) that is a KeyboardInterrupt or came after SIGINT. Not in
    an interactive session, where that exception may be an old one."""
    if hasattr(sys, "ps1") or sys.flags.interactive or sys.flags.inspect:
        return False
    uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return uncaught is not None and (isinstance(uncaught, KeyboardInterrupt) or _state.interrupted)


def shutdown():
    """Stops mxplugin, on every rank: once one rank calls it, collectives still
    pending on any rank fail with an error saying so, so read the results you
    need (asnumpy(), mx.nd.waitall()) first. Again, or before init(): nothing."""
    with _state.lock:
        core = _state.core
        if core is None:
            return
        _state.core = None
        _state.shut_down = True
    phases.tell(phases.DONE)
    core.shutdown()


def is_initialized():
    """Whether init() has run in this process and shutdown() has not."""
    return _state.core is not None


def _topology(key):
    _core()
    return _state.topology[key]


def size():
    """The number of ranks of the job."""
    return _topology("size")


def rank():
    """This process's rank, in [0, size())."""
    return _topology("rank")


def local_size():
    """The number of ranks on this process's machine."""
    return _topology("local_size")


def local_rank():
    """This process's rank among the ranks on this machine."""
    return _topology("local_rank")


def cross_size():
    """The number of machines that have a rank of this process's local_rank()."""
    return _topology("cross_size")


def cross_rank():
    """The index of this process's machine among those of cross_size()."""
    return _topology("cross_rank")


def mpi_threads_supported():
    """Whether MPI runs at the thread level MPI_THREAD_MULTIPLE (any thread may call it)."""
    return _topology("threads_multiple")


def mpi_enabled():
    """Whether MPI is in use at run time: always."""
    return True


def mpi_built():
    """Whether this build has MPI: always."""
    return True


def gloo_enabled():
    """Whether Gloo is in use at run time: never."""
    return False


def gloo_built():
    """Whether this build has Gloo: never."""
    return False


def nccl_built():
    """The version of NCCL this build has (0: none)."""
    return _core_module().nccl_built()


def cuda_built():
    """Whether this build has its CUDA kernels (GPU arrays' scaling and fusion copies)."""
    return _core_module().cuda_built()


def ddl_built():
    """Whether this build has IBM DDL: never."""
    return False


def ccl_built():
    """Whether this build has oneCCL: never."""
    return False


def rocm_built():
    """Whether this is a ROCm build: never."""
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a timeline of this rank's collectives (each one's negotiation and transfer), a
    Chrome trace file: open it in chrome://tracing or Perfetto."""
    _core().start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops the timeline start_timeline() (or MXPLUGIN_TIMELINE) started, and closes its file."""
    _core().stop_timeline()


def add_process_set(process_set):
    """Registers a process set, so that collectives can run on it. Every rank
    makes the call (members or not), in the same order: it waits for them all."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ArgumentError(f"{process_set} is already registered")
    process_set.process_set_id = _core().add_process_set(process_set.ranks)
    return process_set


def remove_process_set(process_set):
    """Unregisters a process set. Every rank makes the call (members or not),
    in the same order: it waits for them all."""
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"remove_process_set takes the ProcessSet that add_process_set returned, got "
                        f"{type(process_set).__name__}")
    if process_set.process_set_id in (None, 0):
        return False
    removed = _core().remove_process_set(process_set.process_set_id)
    process_set._invalidate()
    return removed


_reference_basics.complete(globals())  # the reference sections of the public names above
