"""Runs one rank of an elastic world as a child and tells the launcher how
it ended (python -m mxplugin.elastic.supervisor CMD ...).

MPICH's launcher tears the whole job down when a rank ends by a signal,
even with -disable-auto-cleanup, which would kill the survivors holding the
committed state. So each rank runs under this supervisor: it reports the
child's end to the launcher's service ("signal 9", "code 1") and exits with
a plain code (128 + the signal), which leaves the other ranks running."""
import os
import signal
import subprocess
import sys

from mxplugin.elastic.client import driver

# Passed on to the rank: the launcher's stop.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def rank_from_environment():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return None


def main(argv):
    if not argv:
        print("usage: python -m mxplugin.elastic.supervisor CMD [ARGS...]", file=sys.stderr)
        return 2
    # close_fds=False: the rank talks to MPICH's launcher over the
    # descriptor named in PMI_FD, inherited from here.
    child = subprocess.Popen(argv, close_fds=False)

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    # With -disable-auto-cleanup MPICH's launcher sends SIGUSR1 to the ranks
    # still running when one ends; its default action would end this
    # supervisor (and a rank it was passed to), though the ranks find lost
    # peers themselves.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    returncode = child.wait()
    how = f"signal {-returncode}" if returncode < 0 else f"code {returncode}"
    client = driver(rank_from_environment())
    if client is not None:
        try:
            client.report_exit(how)
        except OSError as exc:  # the launcher is gone: nothing to tell
            print(f"mxplugin: rank {client.rank}: cannot reach the launcher: {exc}", file=sys.stderr)
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
