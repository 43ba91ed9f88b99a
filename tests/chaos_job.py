"""The elastic job a chaos run (tests/chaos.py) troubles: mxplugin-run on
the first fake host, --min-np 2 up to every host, hosts found by a
discovery script that reads a file the run rewrites, a short cool-down so
that hosts left out after a fault come back, and the digits MLP of
examples/mxnet_elastic_digits.py training with a line per step and per
commit until the run releases it. Also what the faults need of it: the
world running now, waits on its output, its rank processes (through the
kernel's process events, tests/rank_processes.py) and signals sent to them,
recorded."""
import os
import re
import subprocess
import sys
import threading
import time

from chaos_log import MIN_ACCURACY, STEP, WORLD, World, wait_line, world_hosts, worlds  # noqa: F401 (chaos.py's)
from fake_cluster import ENV, IFACE
from mpi_harness import REPO, rank_env
from rank_processes import RankProcesses

EXAMPLE = os.path.join(REPO, "examples", "mxnet_elastic_digits.py")
COMMIT_EVERY = 3
# So the job is released only once it has trained this many epochs (a CI
# run released after its 4th, its faults all done early: 0.944 after the
# 3rd, 0.925 after the 4th). Epochs take a fraction of a second here.
SETTLED_EPOCHS = 8
EPOCH_DONE = re.compile(r"^epoch (\d+): test accuracy ")
MIN_NP = 2
# A host left out after a fault is tried again this soon (doubling per
# further fault of that host, up to the second figure).
COOLDOWN_RANGE = ("2", "4")
# Waits on the job bound hangs only (Note [Hang limits] in mpi_harness.py).
WAIT_S = 240
# A fault is injected in a world of at least this many ranks, so that the
# ranks it takes leave at least --min-np.
FAULT_WORLD_MIN = MIN_NP + 1
# How often new rank processes are looked at for their world and rank
# (from the environment the launcher gave them): a rank lives a second at
# least (Python and MXNet load), unless a fault kills it as it starts.
IDENTITY_SCAN_S = 0.1


class ChaosError(AssertionError):
    """The job did not do what the run waited for; the message says what."""


class ChaosJob:
    def __init__(self, cluster, peer_timeout_s, epochs):
        self.cluster, self.peer_timeout_s = cluster, peer_timeout_s
        self.discovery = os.path.join(cluster.dir, "hosts")
        self.release_file = os.path.join(cluster.dir, "release")
        self.write_discovery(range(len(cluster.hosts)))
        self.injected = {}  # pid -> [signal numbers the run sent it]
        self.killed_with_host = set()  # pids killed with every other process of their host
        self.ranks = RankProcesses(cluster.hosts, EXAMPLE).start()
        self.closing = threading.Event()
        self.identities = threading.Thread(target=self._identify_ranks, name="rank-identities", daemon=True)
        self.identities.start()
        argv = [sys.executable, "-m", "mxplugin_run", "--verbose", "--rsh", cluster.rsh, "--network-interface", IFACE,
                "--min-np", str(MIN_NP), "--max-np", str(len(cluster.hosts)), "--host-discovery-script",
                f"cat {self.discovery}", "--blacklist-cooldown-range", *COOLDOWN_RANGE,
                sys.executable, EXAMPLE, "--epochs", str(epochs), "--log-steps", "--commit-every", str(COMMIT_EVERY),
                "--min-accuracy", str(MIN_ACCURACY), "--until-exists", self.release_file]
        self.started = time.monotonic()
        env = rank_env({**ENV, "MXPLUGIN_PEER_TIMEOUT_SECONDS": peer_timeout_s})
        self.proc, self.log = cluster.start(0, argv, env=env, cwd=REPO)

    # -- the job's hosts ------------------------------------------------------------------------
    def write_discovery(self, indexes):
        """What the discovery script prints from now on: the hosts `indexes`."""
        with open(self.discovery + ".tmp", "w") as f:
            f.write("".join(f"{self.cluster.hosts[i]}:1\n" for i in indexes))
        os.replace(self.discovery + ".tmp", self.discovery)  # the launcher never reads half a list

    def index(self, host):
        return self.cluster.hosts.index(host)

    # -- its output -----------------------------------------------------------------------------
    def lines(self):
        with self.log.cond:
            return list(self.log.lines)

    def world(self):
        """The newest world the launcher started, or None."""
        found = worlds(self.lines())
        return found[-1] if found else None

    def wait_line(self, predicate, start, what, timeout=WAIT_S):
        found = wait_line(self.log, predicate, start, timeout)
        if found is None:
            raise ChaosError(f"waited {timeout} s for {what} (launcher {self.state()})")
        return found

    def state(self):
        code = self.proc.poll()
        return "running" if code is None else f"exited {code}"

    def next_world(self, after, what="a new world"):
        """The first world numbered above `after` (a World), once the launcher starts it."""
        i, when, text = self.wait_line(lambda t: (m := WORLD.match(t)) is not None and int(m.group(1)) > after.number,
                                       after.index, what)
        m = WORLD.match(text)
        return World(int(m.group(1)), world_hosts(m), i, when)

    def first_step_after(self, world, without=None):
        """(index, time) of the first step of a world numbered above
        `world`'s (and, with `without`, one without that host)."""
        size = []

        def predicate(text):
            m = WORLD.match(text)
            if m and int(m.group(1)) > world.number:
                size[:] = [int(m.group(2))] if without not in world_hosts(m) else []
                return False
            s = STEP.match(text)
            return bool(size) and s is not None and int(s.group(3)) == size[0]
        i, when, _ = self.wait_line(predicate, world.index, f"the first step of a world after world {world.number}"
                                    + (f" without {without}" if without else ""))
        return i, when

    def ready_world(self):
        """The world running now once a fault may hit it: it has at least
        FAULT_WORLD_MIN ranks and has made a commit of its own (so that the
        worlds the fault costs do not stall the job: the launcher stops a
        job whose worlds keep ending without a new commit)."""
        while True:
            world = self.world()
            if world is None:
                self.wait_line(WORLD.match, 0, "the first world")
                continue
            if len(world.hosts) < FAULT_WORLD_MIN:
                self.next_world(world, f"a world of {FAULT_WORLD_MIN} ranks or more")
                continue
            _, _, text = self.wait_line(lambda t: t.startswith("commit ") or WORLD.match(t) is not None,
                                        world.index + 1, f"a commit in world {world.number}")
            if not WORLD.match(text) and self.world().number == world.number:
                return world

    # -- its ranks ------------------------------------------------------------------------------
    def rank_on(self, host, since=None, timeout=WAIT_S):
        """The newest rank process running on host index `host` (started
        after monotonic time `since`), waiting for one."""
        def newest():
            found = [r for r in self.ranks.all_ranks
                     if r.how is None and r.host == host and (since is None or r.started >= since)]
            return found[-1] if found else None
        if not self.ranks.wait_for(lambda: newest() is not None, timeout):
            raise ChaosError(f"no rank process on {self.cluster.hosts[host]} within {timeout} s")
        with self.ranks.lock:
            return newest()

    def send(self, pid, signum):
        """Sends `signum` to `pid`, recorded as injected."""
        self.injected.setdefault(pid, []).append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    # -- its end --------------------------------------------------------------------------------
    def finish(self, timeout=WAIT_S):
        """Lets the training end once past SETTLED_EPOCHS; the launcher's exit code."""
        self.wait_line(lambda t: (m := EPOCH_DONE.match(t)) is not None and int(m.group(1)) >= SETTLED_EPOCHS, 0,
                       f"epoch {SETTLED_EPOCHS}", timeout)
        open(self.release_file, "w").close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ChaosError(f"the launcher did not end within {timeout} s of the release") from None
        self.log.thread.join(timeout=10)
        return self.proc.returncode

    def _identify_ranks(self):
        """Sets each rank process's `world` and `rank` (numbers, from its
        environment) as it starts, so that its end can be matched with what
        the launcher and its world said (tests/chaos_checks.py rank_records)."""
        while not self.closing.wait(IDENTITY_SCAN_S):
            with self.ranks.lock:
                new = [r for r in self.ranks.all_ranks if not hasattr(r, "world")]
            for rank in new:
                rank.world, rank.rank = identity(rank.pid)

    def close(self):
        self.closing.set()
        self.identities.join()
        self.ranks.stop()


def identity(pid):
    """(world, rank) of the rank process `pid` as its environment says
    (MXPLUGIN_ELASTIC_WORLD, PMI_RANK), or (None, None) once it is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None, None
    world, rank = env.get(b"MXPLUGIN_ELASTIC_WORLD"), env.get(b"PMI_RANK")
    return (int(world) if world else None), (int(rank) if rank else None)
