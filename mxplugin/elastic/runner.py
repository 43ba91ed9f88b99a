"""`mxplugin.elastic.run`: runs a training function so that the job
survives lost ranks and changed hosts.

Note [Worlds]: an MPI world cannot grow or shrink, so each change of ranks
is a new world, a new mpiexec started by the launcher
(mxplugin_run.elastic.driver). Within a world the function runs once.
- A rank is lost: its agent tells the launcher at once, and the
  launcher tells the others (the watcher thread here long-polls it). When
  a whole host is lost (its MPICH proxy too), mpiexec ends and kills the
  other ranks' process groups; ranks run in sessions of their own, so they
  outlive that, and the launcher tells them the world is over. Either way
  each survivor hands its last committed snapshot to the launcher, which
  keeps the newest. A rank whose collectives fail first (PeerFailureError,
  an MXNetError naming the lost contact) does the same.
- The launcher finds new hosts: every rank raises HostsUpdatedInterrupt at
  its next commit, and rank 0 hands over the snapshot it just committed.
Then the ranks leave with EXIT_RESET, without MPI's clean-up (a peer is
gone: it could wait forever). A rank that gets no answer from the launcher
for LAUNCHER_GONE_S seconds leaves too, handing nothing over: there is no
job without it (Note [Partitions] in world_end.py). In the
next world, rank 0 starts from the newest snapshot (or the launcher's
checkpoint when no rank survived), gives it to every rank (State.sync) and
the reset callbacks run; then the function runs again, from the restored
values."""
import functools
import http.client
import os
import signal
import sys
import threading
import time

import mxplugin as hvd
from mxplugin import basics as _basics
import mxplugin.elastic.client as _client
import mxplugin.elastic.last_words as last_words
from mxplugin_run import phases
from mxplugin_run.protocol import EXIT_RESET
from mxplugin_run.timeouts import (FREEZE_TICK_S, FROZEN_GAP_S, LAST_WORDS_S, LAUNCHER_GONE_S, LEAVE_TOGETHER_S,
                                      LEAVE_WORLD_S, LONG_POLL_S)
from mxplugin.elastic.state import HostsUpdatedInterrupt, read_checkpoint
from mxplugin.errors import NotInitializedError, PeerFailureError

try:
    from mxnet.base import MXNetError
except ImportError:  # pragma: no cover - mxplugin's Python API needs MXNet
    MXNetError = RuntimeError


def is_peer_failure(exc):
    """A collective failed because a peer is gone, stopped or left (not a
    bug on this rank): a PeerFailureError, or MXNet's error for an op the
    core failed so (an engine op's error keeps only the message; the core
    keeps the code)."""
    if isinstance(exc, PeerFailureError):
        return True
    if not isinstance(exc, MXNetError):
        return False
    try:
        return _basics._core().failed_for_peers()
    except NotInitializedError:
        return False


def _log(text):
    """One line of this rank's."""
    last_words.say(text, hvd.rank)


def _start(state, client):
    """Makes every rank's state rank 0's: in a later world, the newest
    committed copy the launcher holds, or its checkpoint."""
    source = None
    if client is not None and hvd.rank() == 0:
        handed = client.fetch_state()
        path = _client.checkpoint_path()
        saved = read_checkpoint(path) if path else None
        if saved is not None and (handed is None or saved[0] > handed[0]):
            handed, source = saved, f"checkpoint {path}"
        elif handed is not None:
            source = "the state handed over by the last world"
        if handed is not None:
            state.loads(handed[1])
    state.sync()
    if client is not None and _client.world_number() > 0:
        if source is not None:
            _log(f"world {_client.world_number()} of {hvd.size()} ranks resumes from commit {state.commits} "
                 f"({source})")
        state.on_reset()


# One way out per process: the training thread and the watcher may both
# find the world broken at once. `_finished`: the function returned here;
# a peer lost after that changes nothing for this rank.
_leaving = threading.Lock()
_finished = threading.Event()
EXIT_STOPPED = last_words.EXIT_STOPPED
_bounded = last_words.bounded


def _end(code, text=None):
    """Ends this process now, without MPI's clean-up (a peer is gone: it
    could wait forever), saying `text` first (last_words.end)."""
    last_words.end(code, text, hvd.rank)  # called within the bounded write: it may wait on a stuck core


def _leave(state, client, reason, hand_over):
    with _leaving:
        if _finished.is_set():
            return
        # Told first: should MPI crash under the core's thread as its peers
        # leave too, the crash is read as this rank's leaving, not as a
        # lost rank, though it may come before the launcher heard the
        # leave (Note [One rule for a world's end] in mxplugin_run/elastic/rank_ends.py).
        phases.tell(phases.LEAVING)
        _leave_world()
        try:
            try:
                if hand_over:
                    commits = state.commits_saved()
                    if client.state_commit() < commits:
                        client.hand_over(commits, state.dumps())
                client.leave(reason)
            except Exception as exc:  # noqa: BLE001 - whatever failed, this rank must still leave
                text = f"cannot hand the state over to the launcher: {exc}"
                _bounded(lambda: _log(text))
            if reason == "hosts":
                _wait_for_peers_to_leave(client)
        finally:
            _end(EXIT_RESET)


# Note [Leaving together]: when the launcher's hosts change, every rank of
# the world decides at one commit to end it, and all are alive. Were each to
# exit as it came to leave, a slower rank's core would still be in a
# negotiation round with peers that had gone, and MPICH would crash under
# it. So a rank leaving for new hosts has parked its core
# (Note [Leaving a broken world]) and waits until the launcher says every
# rank of its world has left, ended or is out of reach, and only then exits:
# by then no core of the world calls MPI. The wait is bounded (a peer may
# hang in the user's code); the user's stop, or the launcher moving on to
# another world, ends it too.


def _wait_for_peers_to_leave(client):
    try:
        waiting = client.wait_all_left(LEAVE_TOGETHER_S)
    except (OSError, http.client.HTTPException) as exc:
        text = f"cannot hear from the launcher whether the other ranks have left: {exc}"
        _bounded(lambda: _log(text))
        return
    if waiting:
        text = (f"rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))} "
                f"still in this world after {LEAVE_TOGETHER_S:g} s: leaving without waiting longer")
        _bounded(lambda: _log(text))


def _leave_world():
    """Note [Leaving a broken world] (src/backend/leaving.h): this rank's
    core stops calling MPI before the rank hands over and exits, as its
    peers leave too. Waits a moment for the core's thread to park."""
    try:
        _basics._core().leave_world(LEAVE_WORLD_S)
    except Exception:  # noqa: BLE001 - shut down, not started, or an older build: nothing to stop
        pass


def _watch(state, client):
    """Leaves as soon as the launcher learns that this world cannot go on (a
    rank ended, a rank lost contact with its peers, discovery dropped a
    host), rather than when this rank's collectives time out
    (MXPLUGIN_PEER_TIMEOUT_SECONDS): from this thread, so that a training
    thread stuck inside MPI does not hold it. Ends the rank, handing nothing
    over, when the user stopped the job or the launcher is out of reach
    (Note [Partitions] in mxplugin_run/elastic/world_end.py)."""
    last_answer = time.monotonic()
    while not _finished.is_set():
        stuck = _stuck_transfer()
        if stuck:  # Note [Stuck transfers]: the training thread will not come back
            text = f"{stuck}; back to commit {state.commits_saved()}"
            _bounded(lambda: _log(text))
            _leave(state, client, "failure", hand_over=True)
        try:
            kind, why = client.poll_world(LONG_POLL_S)
        except (OSError, http.client.HTTPException):
            # The launcher is gone, or this host is cut off from it (or a
            # blip): without it there is no job, and this rank may have
            # outlived its agent (Note [Worlds]). What it holds may be
            # stale by the time the launcher is back: nothing is handed over.
            silent = time.monotonic() - last_answer
            if silent >= LAUNCHER_GONE_S:
                _end(EXIT_RESET, f"the launcher has not answered for {silent:.0f} s: leaving without handing "
                                 "anything over")
            time.sleep(1)
            continue
        last_answer = time.monotonic()
        if kind == "over":  # this world is over without us: nothing to hand over any more
            _end(EXIT_RESET)
        if kind == "stop":
            try:  # said first: its agent may be gone already (MPICH's forced stop)
                client.leave("stopped", timeout=LAST_WORDS_S)
            except OSError:
                pass
            _end(EXIT_STOPPED, f"{why}: ending now")
        if kind == "broken":
            if not _leaving.locked():  # else the training thread is leaving already, and says why
                text = f"the launcher says {why}; back to commit {state.commits_saved()}"
                _bounded(lambda: _log(text))
            _leave(state, client, "failure", hand_over=True)


# Note [Frozen ranks]: a rank stopped (SIGSTOP, a frozen container) for
# longer than the peer timeout has lost its world: its peers gave up on it
# and left, and the launcher went on without it. When it is let go, its
# core's thread resumes inside MPI against peers that are gone, and MPICH
# crashes there within milliseconds (SIGSEGV in MPI_Iallreduce, SIGABRT, or
# exit 255), while the watcher, whose long poll was answered before the
# world ended, needs a new connection and a second request to hear it. So a
# thread of its own notices the gap (CLOCK_MONOTONIC runs on while a process
# is stopped, not while the machine sleeps) and asks the launcher at once,
# over a connection kept open for this, whether this world is over; if so
# the rank ends there, handing nothing over (it holds nothing newer than
# what its peers handed over, Note [Partitions]). A world still running (the
# whole job was paused) goes on as the watcher decides. The core closes the
# window itself: its thread makes no MPI call after such a gap until it
# knows no peer ended (Note [A rank that was stopped] in
# src/backend/mpi/mpi_control_plane.cc); this thread stays for what the core
# cannot see (a world over while every old peer lives on).


def _guard_freezes(client):
    probe = _client.WorldProbe(client)
    try:
        probe.world_over()  # opens the connection now, while nothing is wrong
    except OSError:
        pass
    last = time.monotonic()
    while not _finished.is_set():
        time.sleep(FREEZE_TICK_S)
        now = time.monotonic()
        if now - last > FROZEN_GAP_S:
            try:
                if probe.world_over():
                    os._exit(EXIT_RESET)
            except OSError:  # out of reach: the watcher's to judge (LAUNCHER_GONE_S)
                pass
        last = now


def _stuck_transfer():
    """Why the core's data plane is stuck with peers out of reach, or ""."""
    try:
        return _basics._core().stuck_transfer()
    except Exception:  # noqa: BLE001 - shut down, or not started: nothing is stuck
        return ""


def run(func):
    """Decorator for the training function ``func(state, ...)``: in an
    elastic launch (``mxplugin-run --min-np N --max-np M ...``) the job goes
    on from the state's last commit when ranks are lost or hosts change.
    Outside an elastic launch it syncs the state from rank 0 and calls func
    once.

    Horovod: ``hvd.elastic.run``, same use. Horovod resets within the same
    processes (after a failure it restores the last commit; then it
    initializes again, syncs and calls the function again); here each change
    of ranks is a new world: the ranks hand their last commit to the
    launcher and exit, the launcher starts the script again on the new
    ranks, and ``run`` there starts from that commit. So the code before
    the call runs again in every world (build the network and the state,
    register the reset callbacks there), and the reset callbacks run after
    the state's sync (Horovod's, before it).

    Parameters
    ----------
    func : callable
        The training function, called as ``func(state, *args, **kwargs)``
        with the wrapper's arguments, once ``state`` (a ``State``) holds
        rank 0's values on every rank. Let ``HostsUpdatedInterrupt`` and
        the errors of collectives propagate out of it.

    Returns
    -------
    callable
        The wrapper, ``wrapper(state, *args, **kwargs)``, which returns what
        ``func`` returns. In an elastic launch a rank whose world ends (a
        lost peer, changed hosts) does not return: it exits, the last commit
        handed to the launcher, and the next world starts from there.

    Raises
    ------
    Exception
        What ``func`` raises, other than what ends a world in an elastic
        launch (a lost peer's error, ``HostsUpdatedInterrupt``). In an
        elastic launch the launcher then stops the job, as a new world
        would fail alike.

    Examples
    --------
    >>> import mxplugin as hvd
    >>> hvd.init()
    >>> state = hvd.elastic.ObjectState(epoch=0, seen=0)
    >>> @hvd.elastic.run
    ... def train(state, epochs):
    ...     while state.epoch < epochs:
    ...         state.seen += hvd.size()  # an epoch's work
    ...         state.epoch += 1
    ...         state.commit()  # a new world goes on from the last commit
    ...     return state.seen
    >>> train(state, 3) == 3 * hvd.size()
    True
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        client = _client.driver(hvd.rank())
        if client is not None:
            # A stuck transfer is this thread's to handle (by handing the
            # last commit over), not the core's (by ending the process).
            _basics._core().keep_running_when_stuck()
            client.register()
            # From the start: a rank lost while the state is synced must not
            # leave the others waiting for the peer timeout. Until the sync
            # the state is this rank's initial one, handed over only if the
            # launcher holds nothing newer.
            threading.Thread(target=_watch, args=(state, client), name="mxplugin-elastic-watch", daemon=True).start()
            threading.Thread(target=_guard_freezes, args=(client,), name="mxplugin-elastic-freezes",
                             daemon=True).start()
        _start(state, client)
        try:
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            if client is None:
                raise
            if hvd.rank() == 0:
                _log(f"hosts changed: ending this world at commit {state.commits}")
            _leave(state, client, "hosts", hand_over=hvd.rank() == 0)
        except Exception as exc:  # noqa: BLE001 - a peer failure is told from others below
            if client is not None and _leaving.locked():
                # The watcher is leaving, and this rank's ops fail from then
                # on (Note [Leaving a broken world]): wait for it to end the
                # process rather than end it with this error.
                _leave(state, client, "failure", hand_over=True)
            if client is None or not is_peer_failure(exc):
                raise
            _log(f"a peer failed ({str(exc).splitlines()[0][:400]}); back to commit {state.commits_saved()}")
            _leave(state, client, "failure", hand_over=True)
        if client is not None:
            with _leaving:
                _finished.set()
            phases.tell(phases.DONE)
            client.leave("done")
        return result

    return wrapper
