"""Watching the launcher while MPI starts, in an elastic launch (Note
[Leaving MPI's start]): basics.init() runs the guard around the core's
start; the training function's watcher (runner.py) takes over after."""
import http.client
import os
import threading
import time

import mxplugin.elastic.client as _client
import mxplugin.elastic.last_words as last_words
from mxplugin.elastic.last_words import EXIT_STOPPED
from mxplugin_run.protocol import EXIT_RESET
from mxplugin_run.timeouts import LAUNCHER_GONE_S, LONG_POLL_S

# Note [Leaving MPI's start]: MPI's start (MPI_Init, inside mxplugin.init())
# waits, with no timeout, for every rank of the world, in a PMI barrier
# through MPICH's proxy on its host. A rank lost before it gets there
# (killed as its world starts) leaves the others waiting for good, and
# nothing in them hears that the world is broken: the watcher above starts
# only with the training function. The launcher gives up on them
# (Note [Ranks that never started] in world_record.py) and abandons mpiexec,
# and its proxies' going would end their wait in a crash: MPICH 5.0.2's PMI
# client reads the closed socket and dies (SIGSEGV in PMIU_cmd_read, under
# PMI_Barrier, MPIR_pmi_allgather, the UCX netmod's comm-commit hook and
# MPII_Init_thread), which MXNet's SIGSEGV handler turns into exit 255, or
# SIGABRT when its exit() runs into the threads still running. A rank slow
# to get to MPI's start (MXNet loading on a busy host) would find its proxy
# gone instead: MPICH aborts PMI_Init with the low byte of its error code as
# exit code (1, 15, ...), its message lost with the proxy. So in an elastic
# launch init() has the launcher watched from before MPI's start until it is
# over (StartGuard): a rank whose world is broken, over or stopped by then
# leaves at once, while its proxy is still there (the launcher gives such
# ranks START_GRACE_S), saying so in one line; it holds nothing to hand over
# (the state is synced later), and the launcher counts it as left ("not
# started") rather than waiting for it.
NOT_STARTED = "not started"  # the reason service.py gives such a rank (its NOT_STARTED)


class StartGuard:
    """Note [Leaving MPI's start]: from begin() to end(), ends this process
    when the launcher says its world cannot go on."""

    def __init__(self, client):
        self.client = client
        self.lock = threading.Lock()  # held while leaving, so that end() waits or comes first
        self.done = False

    def begin(self):
        """Asks once now (a world already over: MPI's start would fail on a
        proxy gone), then keeps asking from a thread of its own."""
        self._leave_if_not_running(*self._ask(0))
        threading.Thread(target=self._watch, name="mxplugin-elastic-start", daemon=True).start()
        return self

    def end(self):
        """MPI's start is over (done or failed): the training function's
        watcher takes over from here."""
        with self.lock:
            self.done = True

    def _ask(self, seconds):
        try:
            return self.client.poll_world(seconds)
        except (OSError, http.client.HTTPException):
            return None, None

    def _watch(self):
        last_answer = time.monotonic()
        while not self.done:
            kind, why = self._ask(LONG_POLL_S)
            if kind is None:  # out of reach: as the watcher does, leave once it is gone (Note [Partitions])
                if time.monotonic() - last_answer >= LAUNCHER_GONE_S:
                    self._leave("gone", f"the launcher has not answered for {LAUNCHER_GONE_S} s")
                time.sleep(1)
                continue
            last_answer = time.monotonic()
            self._leave_if_not_running(kind, why)

    def _leave_if_not_running(self, kind, why):
        if kind in ("broken", "over", "stop"):
            self._leave(kind, why)

    def _leave(self, kind, why):
        with self.lock:
            if self.done:
                return
            rank = self.client.rank
            if kind == "over":  # the launcher has moved on: nobody to tell
                last_words.end(EXIT_RESET, "its world is over before MPI had started here: leaving", rank)
            try:
                self.client.leave("stopped" if kind == "stop" else NOT_STARTED, timeout=last_words.LAST_WORDS_S)
            except (OSError, http.client.HTTPException):
                pass
            what = "the launcher says " + why if kind != "gone" else why
            last_words.end(EXIT_STOPPED if kind == "stop" else EXIT_RESET,
                           f"{what} before MPI had started here: leaving", rank)


def guard_start():
    """Note [Leaving MPI's start]: a started StartGuard in an elastic launch
    (the rank from the process manager's PMI_RANK, as MPI is not up yet),
    else None."""
    rank = os.environ.get("PMI_RANK")
    client = _client.driver(int(rank)) if rank and rank.isdigit() else None
    return StartGuard(client).begin() if client is not None else None
