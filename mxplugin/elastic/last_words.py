"""A rank's last words: one line to stderr and its exit, bounded in time.
Shared by the training function's runner (runner.py) and the guard of MPI's
start (start_guard.py), which runs before mxplugin is up; imports nothing
of mxplugin, so that basics.init() may use it."""
import os
import signal
import sys
import threading

from mxplugin_run.timeouts import LAST_WORDS_S

# Exit code of a rank ended by the launcher's stop (as by Ctrl-C).
EXIT_STOPPED = 128 + signal.SIGINT


def say(text, rank):
    """One line of rank `rank`'s (a number, or a function that gives it:
    mxplugin.rank, called here, inside bounded(), as it may wait on a core
    stuck with its peers gone)."""
    try:
        sys.stderr.write(f"mxplugin: elastic: rank {rank() if callable(rank) else rank}: {text}\n")
        sys.stderr.flush()
    except OSError:  # MPICH's proxy, which read our output, is gone with a lost host
        pass


def bounded(action):
    """Runs `action` (a write to stderr, a flush) for at most LAST_WORDS_S:
    with this host cut off, the pipe to MPICH's proxy may stay full for
    good, and a rank that must end cannot wait on it."""
    done = threading.Thread(target=action, daemon=True)
    done.start()
    done.join(LAST_WORDS_S)


def flush(stream):
    """Flushes `stream`, ignoring a reader that is gone (MPICH's proxy with a lost host)."""
    try:
        stream.flush()
    except OSError:
        pass


def end(code, text=None, rank=None):
    """Ends this process now, without MPI's clean-up (a peer is gone: it
    could wait forever), after saying `text` as rank `rank` (see say())."""
    if text:
        bounded(lambda: say(text, rank))
    for stream in (sys.stdout, sys.stderr):
        bounded(lambda stream=stream: flush(stream))
    os._exit(code)
