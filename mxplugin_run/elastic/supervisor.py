"""Runs one rank of an elastic world as a child and tells the launcher how
it ended: python -m mxplugin_run.elastic.supervisor CMD ...

MPICH's launcher tears the whole job down when a rank ends by a signal,
even with -disable-auto-cleanup, which would kill the survivors holding the
committed state. So each rank runs under this supervisor: it reports the
child's end to the launcher's service (signal=9, code=1), which tells
the other ranks at once, and exits with a plain code (128 + the signal),
which leaves them running.

It also starts the keeper that removes the rank's MPICH shared-memory
segments once the rank has ended (Note [Segments of a rank that ended] in
segments.py).

It is part of the launcher's package, which never imports MXNet: a world's
start costs no MXNet import per rank before the rank's own."""
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request

from mxplugin_run import protocol, timeouts
from mxplugin_run.elastic import segments
from mxplugin_run.elastic.rank_ends import ProcessEnd

# Passed on to the rank: the launcher's stop.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

def rank_from_environment():
    for name in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return -1


def tell_launcher(path, what, **query):
    """POSTs `path` with this rank's world and number to the launcher's
    service (nothing outside an elastic launch); says on stderr when it
    could not tell it `what` (None: says nothing)."""
    address = os.environ.get(protocol.ENV_DRIVER)
    if not address:
        return
    query = urllib.parse.urlencode({"world": os.environ.get(protocol.ENV_WORLD, "0"),
                                    "rank": rank_from_environment(), **query})
    request = urllib.request.Request(f"http://{address}{path}?{query}", data=b"", method="POST",
                                     headers={protocol.TOKEN_HEADER: os.environ.get(protocol.ENV_TOKEN, "")})
    try:
        urllib.request.urlopen(request, timeout=timeouts.REQUEST_TIMEOUT_S).close()
    except OSError as exc:  # the launcher is gone, or says this world is over: nothing to tell
        if what is not None:
            print(f"mxplugin: rank {rank_from_environment()}: could not tell the launcher {what}: {exc}",
                  file=sys.stderr)


def report_exit(end):
    """Tells the launcher's service how this rank ended (a ProcessEnd)."""
    tell_launcher("/exit", "how it ended", **end.query())


def say_hello():
    """Tells the launcher's service that this rank's process runs: its host
    was reached (Note [Hosts a world cannot start on] in start_failures.py).
    Quiet when it cannot: the rank's own registration then fails, saying why."""
    tell_launcher("/hello", None)


def main(argv):
    if not argv:
        print("usage: python -m mxplugin_run.elastic.supervisor CMD [ARGS...]", file=sys.stderr)
        return 2
    # Handlers first: a signal between the start and them would end this
    # supervisor, and MPICH would then tear the whole job down.
    children = []
    stops = []  # a stop that came before the child existed

    def forward(signum, _frame):
        if not children:
            stops.append(signum)
            return
        try:
            children[0].send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    # With -disable-auto-cleanup MPICH's launcher sends SIGUSR1 to the ranks
    # still running when one ends; its default action would end this
    # supervisor, though the ranks find lost peers themselves. (The rank
    # inherits the disposition: ignoring it there is as right.)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    # close_fds=False: the rank talks to MPICH's launcher over the
    # descriptor named in PMI_FD, inherited from here. A session of its own:
    # when a whole host is lost MPICH kills every other rank's process group
    # at once, and the rank must outlive that long enough to hand its state
    # over (the launcher tells it to, Note [Worlds]).
    child = subprocess.Popen(argv, close_fds=False, start_new_session=True)
    children.append(child)
    for signum in stops:
        child.send_signal(signum)
    segments.clean_up_after(child.pid)  # Note [Segments of a rank that ended] in segments.py
    say_hello()  # after the start: the rank loads meanwhile
    returncode = child.wait()
    report_exit(ProcessEnd.of_returncode(returncode))
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
