"""A rank's end of an elastic job: requests to the launcher's service
(mxplugin_run.elastic.service), found through the environment the launcher
sets. Outside an elastic launch `driver()` is None."""
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request

from mxplugin_run.protocol import (COMMIT_HEADER, ENV_CHECKPOINT, ENV_DRIVER, ENV_TOKEN, ENV_WORLD,  # noqa: F401
                                       EXIT_RESET, STOP_HEADER, TOKEN_HEADER)
from mxplugin_run.timeouts import ANSWER_SLACK_S, REQUEST_TIMEOUT_S


class DriverClient:
    """Requests of one rank of world `world` to the launcher's service at `address`."""

    def __init__(self, address, token, world, rank=None):
        self.address, self.token, self.world, self.rank = address, token, int(world), rank

    def _request(self, method, path, body=None, timeout=REQUEST_TIMEOUT_S, **query):
        query = {"world": self.world, "rank": -1 if self.rank is None else self.rank, **query}
        url = f"http://{self.address}{path}?{urllib.parse.urlencode(query)}"
        req = urllib.request.Request(url, data=body, method=method, headers={TOKEN_HEADER: self.token})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as reply:
                return reply.status, dict(reply.headers), reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def register(self):
        """Says that this rank's MPI has started (with its pid)."""
        self._request("POST", "/register", pid=os.getpid())

    def hosts_updated(self):
        """Whether the launcher's hosts changed: the world ends at this commit."""
        status, _, body = self._request("GET", "/updates")
        return status == 200 and body == b"1"

    def fetch_state(self):
        """(commit, bytes) of the newest state handed over, or None."""
        status, headers, body = self._request("GET", "/state")
        if status != 200:
            return None
        return int(headers.get(COMMIT_HEADER, -1)), body

    def state_commit(self):
        """The commit of the newest state the launcher holds (-1: none)."""
        _, _, body = self._request("GET", "/state/commit")
        return int(body or -1)

    def hand_over(self, commit, data):
        """Hands this rank's committed state (`data`, of commit `commit`) to the launcher."""
        self._request("PUT", "/state", body=data, commit=commit)

    def leave(self, reason, timeout=REQUEST_TIMEOUT_S):
        """Says why this rank leaves its world ("failure", "hosts", "done", "stopped")."""
        self._request("POST", "/leave", timeout=timeout, reason=reason)

    def wait_all_left(self, seconds):
        """Waits up to `seconds` until every rank of this world has left it,
        ended, or is out of the launcher's reach (Note [Leaving together] in
        runner.py). Returns the ranks still in it when time is up ([] if
        none, or if the world is over). OSError when no answer comes in
        time."""
        status, _, body = self._request("GET", "/all_left", timeout=seconds + ANSWER_SLACK_S, wait=seconds)
        if status != 200 or not body:
            return []
        return [int(r) for r in body.decode().split(",")]

    def wait_broken(self, seconds):
        """Why this world cannot go on, waiting up to `seconds` for the
        launcher to learn of a rank that ended: "" if none did, None once
        the world is over."""
        kind, why = self.poll_world(seconds)
        return None if kind == "over" else why

    def poll_world(self, seconds):
        """What the launcher says of this world, waiting up to `seconds` for
        news: ("running", ""), ("broken", why), ("stop", why) when the user
        stopped the job, or ("over", None) when the world has ended without
        this rank. OSError when no answer comes in time."""
        status, headers, body = self._request("GET", "/broken", timeout=seconds + ANSWER_SLACK_S, wait=seconds)
        if status == 409:
            return "over", None
        if status != 200:
            return "running", ""
        return ("stop" if headers.get(STOP_HEADER) else "broken"), body.decode()

class WorldProbe:
    """Asks the launcher whether this rank's world is over, over a
    connection kept open (HTTP/1.1): one round trip, no connect, no new
    thread in the launcher, when the answer must come within milliseconds
    (Note [Frozen ranks] in runner.py)."""

    def __init__(self, client):
        self.client = client
        self.connection = None
        self.path = "/broken?" + urllib.parse.urlencode({"world": client.world, "rank": client.rank, "wait": 0})

    def world_over(self):
        """True if the launcher says this world is over; False if it runs
        (or is broken: the watcher's to handle); OSError without an answer."""
        try:
            if self.connection is None:
                host, port = self.client.address.rsplit(":", 1)
                self.connection = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_S)
            self.connection.request("GET", self.path, headers={TOKEN_HEADER: self.client.token})
            reply = self.connection.getresponse()
            reply.read()
            return reply.status == 409
        except (OSError, http.client.HTTPException):
            self.close()
            raise OSError("no answer from the launcher")

    def close(self):
        """Closes the kept connection."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def driver(rank=None):
    """The client for this process's elastic job, or None outside one."""
    address = os.environ.get(ENV_DRIVER)
    if not address:
        return None
    return DriverClient(address, os.environ.get(ENV_TOKEN, ""), os.environ.get(ENV_WORLD, "0"), rank)


def world_number():
    """The number of the world this process belongs to."""
    return int(os.environ.get(ENV_WORLD, "0"))


def checkpoint_path():
    """The launcher's --checkpoint-path, or None."""
    return os.environ.get(ENV_CHECKPOINT) or None
