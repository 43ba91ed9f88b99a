"""The launcher's end of an elastic job: a small HTTP service the ranks of
the current world talk to.

Ranks register when MPI has started, ask at every commit whether the hosts
changed, hand over their last committed state when their world ends, and
say why they leave; the ranks' agents (mxplugin_run/rank_agent.py) say
hello as they start their rank, and how its process ended. From that the
launcher tells a rank that died (a fault: restart without its host) from
one that raised an ordinary error (a bug in the script: stop), and the next
world gets the newest committed state.

Requests carry the job's token (a random secret in the ranks' environment):
state travels as a pickle, which only the job's own ranks may send."""
import hmac
import http.server
import secrets
import threading
import time
import urllib.parse

from mxplugin_run.phases import LEAVING, PHASES, STARTING
from mxplugin_run.protocol import COMMIT_HEADER, STOP_HEADER, TOKEN_HEADER
from mxplugin_run.timeouts import MAX_WAIT_S
from mxplugin_run.elastic.rank_ends import ProcessEnd
from mxplugin_run.elastic.world_record import NOT_STARTED, WorldRecord  # noqa: F401  (NOT_STARTED: tests' import)
from mxplugin_run.placement import slot_count

# The phases (phases.py) in which a crash means the rank was not lost
# (Note [One rule for a world's end] in rank_ends.py): how it counts as
# having left, and why its world is broken.
_CRASH_PHASES = {
    # MPI's start torn down under it as its world was: it never started.
    STARTING: (NOT_STARTED, " crashed in MPI's start, as its world was torn down"),
    # MPI crashed under it as its peers left too: it was leaving, as after a failure.
    LEAVING: ("failure", " left (crashed inside MPI as it left)"),
}


class DriverService:
    """Holds the current world's record and the newest committed state."""

    def __init__(self):
        self.token = secrets.token_hex(16)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.world = None
        self.state = None  # (commit number, bytes)
        self.judging = True  # False once the user stopped the job: ranks ending then are not lost
        self.server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _handler_for(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="mxplugin-elastic-driver",
                                       daemon=True)

    @property
    def port(self):
        """The port the service listens on."""
        return self.server.server_address[1]

    def start(self):
        """Serves on a thread of its own; returns self."""
        self.thread.start()
        return self

    def stop(self):
        """Stops serving and closes the socket."""
        self.server.shutdown()
        self.server.server_close()

    def new_world(self, number, hosts):
        """The record of world `number` on `hosts` ([(host, slots)]), now the current one."""
        with self.lock:
            self.world = WorldRecord(number, hosts)
            self.changed.notify_all()
            return self.world

    def stop_judging(self):
        """The user stopped the job: ranks that end from now on are not lost."""
        with self.lock:
            self.judging = False

    def end_world(self, why):
        """mpiexec has ended: ranks still running (a lost host took MPICH's
        launcher down, Note [Worlds]) are told to hand over and leave."""
        self.break_world(why)

    def break_world(self, why):
        """The current world cannot go on: its ranks hand over and leave."""
        with self.lock:
            self._break(self.world, why)

    def _break(self, world, why):
        if world is not None and world.broken is None:
            world.broken = why
            self.changed.notify_all()

    def mark_hosts_gone(self, hosts, why):
        """Discovery no longer lists `hosts` of the current world: its ranks
        there are not waited for, and the others leave now (Note
        [Partitions] in world_end.py)."""
        with self.lock:
            if self.world is None:
                return
            for host in hosts:
                self.world.gone[host] = why
            self._break(self.world, f"{', '.join(hosts)} {'is' if len(hosts) == 1 else 'are'} gone ({why})")

    def stop_ranks(self):
        """The user's stop: ranks still running end now, handing nothing over."""
        with self.lock:
            if self.world is not None:
                self.world.stopping = True
                self.changed.notify_all()

    def unaccounted(self):
        """[(rank, host)] of the current world's ranks that neither left nor
        were reported ended."""
        with self.lock:
            world = self.world
            return [] if world is None else [(r, world.host_of(r)) for r in world.unaccounted()]

    def wait_settled(self, timeout, quiet):
        """Waits until every rank that registered in the current world has
        left or been reported ended (ranks on hosts discovery reported gone
        are not waited for), at most `timeout` seconds, and no longer than
        `quiet` seconds without a word from any rank (ranks cut off from
        the launcher never say anything). True if every rank was accounted
        for."""
        deadline = time.monotonic() + timeout
        with self.lock:
            world = self.world

            def settled():
                return not any(world.waited_for(r) for r in world.registered)

            while not settled():
                left = min(quiet, deadline - time.monotonic())
                if left <= 0 or not self.changed.wait(left):  # time is up, or a quiet spell
                    for r in world.unaccounted():
                        if world.waited_for(r):
                            world.out_of_reach[r] = "gone without a word: its host was probably lost"
                    return False
            return True

    def give_up_on_unstarted(self, grace):
        """Once the current world is broken: waits up to `grace` seconds for
        its ranks to register, leave or end, then counts the others as
        NOT_STARTED (Note [Ranks that never started]); returns them."""
        deadline = time.monotonic() + grace
        with self.lock:
            world = self.world

            def unstarted():
                return [r for r in world.unaccounted() if r not in world.registered]

            while unstarted() and world.broken is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self.changed.wait(left):
                    break
            given_up = unstarted() if world.broken is not None else []
            for r in given_up:
                world.left[r] = NOT_STARTED
            if given_up:
                self.changed.notify_all()
            return given_up

    def break_if_silent(self, after_s):
        """Breaks the current world when a rank still in it has made no
        request for `after_s` seconds (its watcher polls every LONG_POLL_S:
        it is cut off from the launcher, Note [Partitions]); those ranks are
        not waited for any more."""
        now = time.monotonic()
        with self.lock:
            world = self.world
            if world is None:
                return
            silent = [r for r, when in world.heard.items()
                      if r in world.registered and world.waited_for(r) and now - when > after_s]
            for r in silent:
                world.out_of_reach[r] = f"not heard from for {after_s:g} s: cut off from the launcher?"
            if silent:
                listed = ", ".join(f"rank {r} on {world.host_of(r)}" for r in silent)
                self._break(world, f"{listed} not heard from for {after_s:g} s (cut off?)")

    def break_if_not_started(self, after_s):
        """Note [Hosts a world cannot start on] in start_failures.py: breaks
        the current world when, `after_s` seconds after it began, no rank
        has registered and some host has a rank whose agent never said
        hello (nothing started there); those hosts are noted in the world's
        record. The ranks that did start wait inside MPI's start for the
        others: the world's end gives up on them (Note [Ranks that never
        started])."""
        with self.lock:
            world = self.world
            if world is None or world.registered or world.broken is not None:
                return
            if time.monotonic() - world.began < after_s:
                return
            silent = world.hosts_without_hello()
            for host in silent:
                world.not_started[host] = f"no process of its ranks started within {after_s:g} s"
            if silent:
                self._break(world, f"nothing started on {', '.join(silent)} within {after_s:g} s")

    def ending(self):
        """Whether the current world is over for the launcher: broken, or
        every rank's process ended."""
        with self.lock:
            world = self.world
            size = 0 if world is None else slot_count(world.hosts)
            return world is None or world.broken is not None or all(r in world.exits for r in range(size))

    def only_out_of_reach_run(self):
        """WorldRecord.only_out_of_reach_run of the current world."""
        with self.lock:
            return self.world is None or self.world.only_out_of_reach_run()

    def mark_hosts_updated(self):
        """Tells the current world's ranks to end it at their next commit."""
        with self.lock:
            if self.world is not None:
                self.world.hosts_updated = True

    def offer_state(self, commit, data):
        """Keeps `data` if it is newer than the state held; True if kept."""
        with self.lock:
            if self.state is not None and self.state[0] >= commit:
                return False
            self.state = (commit, data)
            return True

    def state_commit(self):
        """The commit of the newest state handed over (-1: none)."""
        with self.lock:
            return -1 if self.state is None else self.state[0]

    # -- requests, called from the server's threads ------------------------------------------
    def handle(self, method, path, query, body):
        """(status, headers, body) for one request."""
        world_number = int(query.get("world", -1))
        with self.lock:
            world = self.world
            current = world is not None and world.number == world_number
            if path == "/state" and method == "GET":
                if self.state is None:
                    return 204, {}, b""
                return 200, {COMMIT_HEADER: str(self.state[0])}, self.state[1]
            if path == "/state/commit" and method == "GET":
                return 200, {}, str(-1 if self.state is None else self.state[0]).encode()
            if not current:  # a rank of a world that has ended
                return 409, {}, b"stale world"
            rank = int(query.get("rank", -1))
            if path in _RANK_REQUESTS and not 0 <= rank < slot_count(world.hosts):
                return 400, {}, f"bad request: rank {rank} is not a rank of world {world.number}".encode()
            if rank >= 0:
                world.heard[rank] = time.monotonic()
            if path == "/hello" and method == "POST":  # Note [Hosts a world cannot start on]
                world.hello.setdefault(rank, time.monotonic())
                return 200, {}, b""
            if path == "/register" and method == "POST":
                world.registered[rank] = int(query.get("pid", 0))
                return 200, {}, b""
            if path == "/updates" and method == "GET":
                return 200, {}, b"1" if world.hosts_updated else b"0"
            if path == "/leave" and method == "POST":
                reason = world.left[rank] = query.get("reason", "failure")
                if reason == "failure" and self.judging:
                    # Its collectives failed: peers stuck in a transfer
                    # (which no timeout bounds) must not wait for theirs.
                    self._break(world, f"rank {rank} on {world.host_of(rank)} lost contact with its peers")
                self.changed.notify_all()
                return 200, {}, b""
            if path == "/exit" and method == "POST":
                end = ProcessEnd.from_query(query)
                if end is None:
                    return 400, {}, b"bad request: /exit names no code=N or signal=N"
                phase = query.get("phase")  # the agent's word (Note [A rank's agent])
                if phase is not None and phase not in PHASES:
                    return 400, {}, f"bad request: /exit names phase {phase!r}, not one of {PHASES}".encode()
                if world.broken is not None and rank not in world.registered:
                    world.left.setdefault(rank, NOT_STARTED)  # Note [Ranks that never started]
                world.exits[rank] = end
                if phase is not None:
                    world.phases[rank] = phase
                if end.crashed and world.ending(rank):
                    world.crashed_when_broken.add(rank)  # Note [One rule for a world's end] in rank_ends.py
                said = _CRASH_PHASES.get(phase) if end.crashed else None
                if said is not None and rank not in world.left:
                    world.left[rank], why = said
                    if self.judging:
                        self._break(world, f"rank {rank} on {world.host_of(rank)}{why}")
                if not end.clean and rank not in world.left and self.judging:
                    self._break(world, f"rank {rank} on {world.host_of(rank)} ended ({end})")
                self.changed.notify_all()
                return 200, {}, b""
            if path == "/broken" and method == "GET":
                wait = _long_poll_wait(query)
                self.changed.wait_for(lambda: world.broken is not None or world.stopping or self.world is not world,
                                      timeout=wait)
                if self.world is not world:
                    return 409, {}, b"stale world"
                if world.stopping:
                    return 200, {STOP_HEADER: "1"}, b"the launcher was stopped"
                return (200, {}, world.broken.encode()) if world.broken else (204, {}, b"")
            if path == "/all_left" and method == "GET":  # Note [Leaving together] in runner.py
                wait = _long_poll_wait(query)
                size = slot_count(world.hosts)

                def all_left():
                    return not any(world.waited_for(r) for r in range(size))

                self.changed.wait_for(lambda: all_left() or world.stopping or self.world is not world,
                                      timeout=wait)
                if self.world is not world:
                    return 409, {}, b"stale world"
                # The ranks still waited for (none: every rank left).
                return 200, {}, ",".join(str(r) for r in range(size) if world.waited_for(r)).encode()
        if path == "/state" and method == "PUT":
            kept = self.offer_state(int(query["commit"]), body)
            return 200, {}, b"kept" if kept else b"older"
        return 404, {}, b"no such request"


def _long_poll_wait(query):
    """How long a long poll asks to be held (ValueError: a bad request)."""
    wait = float(query.get("wait", 0))
    if not 0 <= wait <= MAX_WAIT_S:
        raise ValueError(f"wait {wait} is not within 0..{MAX_WAIT_S:g} s")
    return wait


# Requests about one rank of the current world: the rank must be one.
_RANK_REQUESTS = ("/hello", "/register", "/leave", "/exit")
# Note [What the service reads]: the service listens on every interface,
# so anyone who reaches the launcher's host may talk to it. It reads a
# request's body only once the token is right and the length is one it
# accepts: a committed state (a PUT to /state) as large as the job's
# states may be, anything else MAX_SMALL_BODY bytes; the rest is refused
# unread (403, 413, 400) and the connection closed. A request of an ended
# world (a replay, a slow rank) is refused as stale; one of the current
# world repeats what its rank already said, which changes nothing; a
# committed state no newer than the one held is kept out.
MAX_SMALL_BODY = 64 * 1024


def _handler_for(service):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the launcher's output is the job's; no access log
            pass

        def _serve(self, method):
            url = urllib.parse.urlsplit(self.path)
            refused = self._refusal(method, url.path)  # Note [What the service reads]
            if refused is not None:
                self.close_connection = True
                status, headers, reply = refused
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                query = dict(urllib.parse.parse_qsl(url.query))
                try:
                    status, headers, reply = service.handle(method, url.path, query, body)
                except (KeyError, ValueError, OverflowError) as exc:
                    status, headers, reply = 400, {}, f"bad request: {exc}".encode()
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the rank left while waiting (a watcher's long poll): nobody to answer

        def _refusal(self, method, path):
            """(status, headers, body) when the request is refused unread."""
            if not hmac.compare_digest(self.headers.get(TOKEN_HEADER, "").encode("utf-8", "replace"),
                                       service.token.encode()):
                return 403, {}, b"bad token"
            length = self.headers.get("Content-Length") or "0"
            if not length.isdigit():
                return 400, {}, b"bad request: Content-Length is not a length"
            if int(length) > MAX_SMALL_BODY and not (method == "PUT" and path == "/state"):
                return 413, {}, b"request too large"
            return None

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

    return Handler
