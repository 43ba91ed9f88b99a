"""The launcher's end of an elastic job: a small HTTP service the ranks of
the current world talk to.

Ranks register when they start, ask at every commit whether the hosts
changed, hand over their last committed state when their world ends, and
say why they leave; the rank supervisors (mxplugin.elastic.supervisor) say
how each rank's process ended. From that the launcher tells a rank that died
(a fault: restart without its host) from one that raised an ordinary error
(a bug in the script: stop), and the next world gets the newest committed
state.

Requests carry the job's token (a random secret in the ranks' environment):
state travels as a pickle, which only the job's own ranks may send."""
import hmac
import http.server
import secrets
import threading
import time
import urllib.parse

from mxplugin.elastic.protocol import COMMIT_HEADER, TOKEN_HEADER


class WorldRecord:
    """What the ranks of one world said."""

    def __init__(self, number, hosts):
        self.number = number
        self.hosts = list(hosts)  # [(host, slots)] in rank order
        self.registered = {}      # rank -> pid
        self.left = {}            # rank -> reason ("failure", "hosts", "done")
        self.exits = {}           # rank -> "code N" | "signal N", from the supervisors
        self.hosts_updated = False
        # Why the world cannot go on (a rank ended without leaving), once a
        # supervisor says so: the other ranks stop waiting for it.
        self.broken = None

    def host_of(self, rank):
        # Where the launcher placed the rank (MPICH fills hosts in order),
        # not the name the rank's machine gives itself: that may differ
        # from the name the hosts are listed by.
        start = 0
        for host, slots in self.hosts:
            if rank < start + slots:
                return host
            start += slots
        return "?"


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
        return self.server.server_address[1]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def new_world(self, number, hosts):
        with self.lock:
            self.world = WorldRecord(number, hosts)
            self.changed.notify_all()
            return self.world

    def stop_judging(self):
        with self.lock:
            self.judging = False

    def end_world(self, why):
        """mpiexec has ended: ranks still running (a lost host took MPICH's
        launcher down, Note [Worlds]) are told to hand over and leave."""
        with self.lock:
            if self.world is not None and self.world.broken is None:
                self.world.broken = why
                self.changed.notify_all()

    def wait_settled(self, timeout, quiet):
        """Waits until every rank that registered in the current world has
        left or been reported ended, at most `timeout` seconds, and no longer
        than `quiet` seconds without a word from any rank (ranks of a lost
        host never say anything). True if every rank was accounted for."""
        deadline = time.monotonic() + timeout
        with self.lock:
            world = self.world

            def settled():
                return all(r in world.left or r in world.exits for r in world.registered)

            while not settled():
                left = min(quiet, deadline - time.monotonic())
                if left <= 0 or not self.changed.wait(left):  # time is up, or a quiet spell
                    return settled()
            return True

    def mark_hosts_updated(self):
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
            if path == "/register" and method == "POST":
                world.registered[rank] = int(query.get("pid", 0))
                return 200, {}, b""
            if path == "/updates" and method == "GET":
                return 200, {}, b"1" if world.hosts_updated else b"0"
            if path == "/leave" and method == "POST":
                world.left[rank] = query.get("reason", "failure")
                self.changed.notify_all()
                return 200, {}, b""
            if path == "/exit" and method == "POST":
                how = world.exits[rank] = query.get("how", "?")
                if how != "code 0" and rank not in world.left and world.broken is None and self.judging:
                    world.broken = f"rank {rank} on {world.host_of(rank)} ended ({how})"
                self.changed.notify_all()
                return 200, {}, b""
            if path == "/broken" and method == "GET":
                self.changed.wait_for(lambda: world.broken is not None or self.world is not world,
                                      timeout=float(query.get("wait", 0)))
                if self.world is not world:
                    return 409, {}, b"stale world"
                return (200, {}, world.broken.encode()) if world.broken else (204, {}, b"")
        if path == "/state" and method == "PUT":
            kept = self.offer_state(int(query["commit"]), body)
            return 200, {}, b"kept" if kept else b"older"
        return 404, {}, b"no such request"


def _handler_for(service):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the launcher's output is the job's; no access log
            pass

        def _serve(self, method):
            length = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(length) if length else b""
            if not hmac.compare_digest(self.headers.get(TOKEN_HEADER, ""), service.token):
                status, headers, reply = 403, {}, b"bad token"
            else:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                try:
                    status, headers, reply = service.handle(method, url.path, query, body)
                except (KeyError, ValueError) as exc:
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

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

    return Handler
