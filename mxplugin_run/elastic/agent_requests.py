"""What an elastic rank's agent (mxplugin_run/rank_agent.py) tells the
launcher's service: that its rank runs (/hello), and how it ended (/exit).
Standard library only, as the agent."""
import os
import sys
import urllib.parse
import urllib.request

from mxplugin_run import protocol, timeouts


def tell_launcher(path, rank, what, **query):
    """POSTs `path` with this rank's world and number to the launcher's
    service (nothing outside an elastic launch); says on stderr when it
    could not tell it `what` (None: says nothing)."""
    address = os.environ.get(protocol.ENV_DRIVER)
    if not address:
        return
    query = urllib.parse.urlencode({"world": os.environ.get(protocol.ENV_WORLD, "0"),
                                    "rank": -1 if rank is None else rank, **query})
    request = urllib.request.Request(f"http://{address}{path}?{query}", data=b"", method="POST",
                                     headers={protocol.TOKEN_HEADER: os.environ.get(protocol.ENV_TOKEN, "")})
    try:
        urllib.request.urlopen(request, timeout=timeouts.REQUEST_TIMEOUT_S).close()
    except OSError as exc:  # the launcher is gone, or says this world is over: nothing to tell
        if what is not None:
            print(f"mxplugin: rank {rank}: could not tell the launcher {what}: {exc}", file=sys.stderr)


def say_hello(rank):
    """Tells the service that this rank's process runs: its host was
    reached (Note [Hosts a world cannot start on] in start_failures.py).
    Quiet when it cannot: the rank's own registration then fails, saying why."""
    tell_launcher("/hello", rank, None)


def report_end(rank, end, phase):
    """Tells the service how this rank ended (a ProcessEnd) and in which
    phase (phases.py)."""
    tell_launcher("/exit", rank, "how it ended", phase=phase, **end.query())
