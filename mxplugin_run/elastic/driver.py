"""mxplugin-run's elastic mode (--min-np, --max-np, --host-discovery-script):
runs worlds one after another until the training ends (Note [Worlds] in
mxplugin.elastic.runner).

Each world is one mpiexec over the hosts usable now, each rank beside
its agent (Note [A rank's agent] in mxplugin_run/rank_agent.py). When it
ends, what its ranks and their agents told the service (mxplugin_run.elastic.service) decides what comes next:
- every rank finished: the job is done;
- ranks died (a signal, or gone without a word) while others survived:
  their hosts are left out for a cool-down (Note [Cool-downs] in
  cooldown.py), and a new world starts from the survivors' committed state;
- every rank died: a new world starts from the newest committed state the
  launcher holds or its checkpoint; with neither, the job stops;
- a rank exited with an error of its own (not a lost peer): the job stops,
  since a restart would fail the same way;
- the hosts changed: the ranks left at a commit; a new world starts;
- a host was cut off (Note [Partitions] in world_end.py): the ranks the
  launcher reaches go back to their last commit, mpiexec is abandoned after
  a bounded wait, and a new world starts without the host;
- the world could not start on some hosts (Note [Hosts a world cannot start
  on] in start_failures.py): they are left out for a cool-down, and a new
  world starts without them.
Each new world after one that started counts as a reset; more than
--reset-limit stops the job."""
import fcntl
import os
import shlex
import socket
import struct
import sys
import threading
import time

import mxplugin_run
from mxplugin_run import protocol
from mxplugin_run.elastic.cooldown import DEFAULT_COOLDOWN_RANGE, LeftOutHosts, describe_cooldown
from mxplugin_run.elastic.discovery import DiscoveryError, DiscoveryScript, FixedHosts, usable
from mxplugin_run.elastic.service import DriverService
from mxplugin_run.elastic.rank_ends import Cause, Next, WorldSeen, classify
from mxplugin_run.elastic.start_failures import hosts_not_started, leave_out_not_started
from mxplugin_run.timeouts import REACH_BACK_S, SETTLE_QUIET_S, SETTLE_S
from mxplugin_run.elastic.world_end import WorldEnd, left_behind
from mxplugin_run.hosts import UsageError, is_local_host, unreachable_hosts
from mxplugin_run import signal_wait
from mxplugin_run.job import Job

SIOCGIFADDR = 0x8915
# A job whose worlds keep ending before anything new is committed (ranks
# dying at start-up, say) stops rather than restart forever.
MAX_WORLDS_WITHOUT_PROGRESS = 3
# Note [Hosts that cannot reach the launcher]: the check run on a host back
# from its cool-down (REACH_BACK_S: a host whose route is gone fails at
# once; one whose neighbour never answers, once ARP gives up: about 3 s).



def reach_back_command():
    """The agent's reach check (rank_agent.py --reach) as the remote shell runs it: this Python, with this
    launcher's package on its path (a remote shell passes no PYTHONPATH on,
    and the package may not be installed where it was found here)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(mxplugin_run.__file__)))
    return ("env", f"PYTHONPATH={root}", sys.executable, "-m", "mxplugin_run.rank_agent", "--reach")

class ElasticError(Exception):
    """The elastic job cannot go on; the message says why."""


def interface_address(name):
    """The IPv4 address of network interface `name` on this host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise UsageError(f"--network-interface {name}: no IPv4 address here ({exc.strerror})") from exc
    return socket.inet_ntoa(packed[20:24])


def advertised_address(iface, hosts):
    """Where the ranks reach this launcher's service."""
    if iface:
        return interface_address(iface)
    if all(is_local_host(h) for h, _ in hosts):
        return "127.0.0.1"
    return socket.gethostbyname(socket.getfqdn())


class ElasticDriver:
    """The elastic launcher: starts a world on the usable hosts, judges how it
    ended, and starts the next one until the job is done (Note [Worlds] in
    runner.py)."""

    def __init__(self, args, env, prog, make_command):
        """make_command(hosts, num_proc) -> the mpiexec command line of a world."""
        self.args, self.env, self.prog, self.make_command = args, env, prog, make_command
        self.discovery = (DiscoveryScript(args.host_discovery_script, getattr(args, "slots_per_host", None)) if args.host_discovery_script
                          else FixedHosts(args.static_hosts))
        self.max_np = args.max_np if args.max_np is not None else args.num_proc
        self.min_np = args.min_np if args.min_np is not None else (args.num_proc or 1)
        # Hosts whose ranks were lost, each left out for a cool-down (Note [Cool-downs] in cooldown.py).
        self.left_out = LeftOutHosts(args.blacklist_cooldown_range or DEFAULT_COOLDOWN_RANGE)
        self.unreachable = set()  # hosts the last world left out, not seen as a change while it runs
        self.service_port = None  # the launcher's service, once it runs (Note [Hosts that cannot reach the launcher])
        self.world_hosts = []
        self.stop_watching = threading.Event()

    def say(self, text):
        """One line of the launcher's, on stderr."""
        sys.stderr.write(f"{self.prog}: elastic: {text}\n")
        sys.stderr.flush()

    # -- hosts ------------------------------------------------------------------------------
    def choose(self, found):
        """The hosts of a world from those found: the ones not cooling down
        nor unreachable now (every candidate is probed, then the list is cut
        at --max-np, so the watcher's view agrees with it)."""
        left_out = self.left_out_now()
        candidates = [(h, s) for h, s in found if h not in left_out]
        unreachable = dict(unreachable_hosts(candidates, self.args.rsh, self.args.ssh_connect_timeout))
        if unreachable and set(unreachable) != self.unreachable:
            self.say(f"leaving out for now: {', '.join(unreachable.values())}")
        self.unreachable = set(unreachable)
        return self.usable_now(found)

    def usable_now(self, found):
        """The hosts of `found` a world may use now, cut at --max-np."""
        return usable(found, {**self.left_out_now(), **dict.fromkeys(self.unreachable)}, self.max_np)

    def left_out_now(self):
        """{host: why} of the hosts cooling down. A host whose cool-down is
        over comes back once it answers the remote shell; one that does not
        is left out again, for longer (Note [Cool-downs] in cooldown.py)."""
        for host, why, faults in self.left_out.take_returned():
            if unreachable_hosts([(host, 1)], self.args.rsh, self.args.ssh_connect_timeout):
                seconds = self.left_out.leave_out(host, f"unreachable after its cool-down ({why})")
                self.say(f"{host}'s cool-down is over but it does not answer: left out {describe_cooldown(seconds)}")
                continue
            cut = self.cannot_reach_back(host)
            if cut:
                seconds = self.left_out.leave_out(host, f"it could not reach the launcher after its cool-down ({why})")
                self.say(f"{host}'s cool-down is over but it cannot reach the launcher: {cut}; left out "
                         f"{describe_cooldown(seconds)}")
                continue
            self.say(f"{host}'s cool-down is over (left out after its fault {faults}: {why}): trying it again")
        return self.left_out.now()

    # Note [Hosts that cannot reach the launcher]: a host left out after a
    # fault may answer the remote shell when its cool-down ends and still be
    # cut off from the launcher (its link down, a console or a namespace's
    # shell still working). A world started there cannot start
    # (Note [Hosts a world cannot start on] in start_failures.py), and
    # mpiexec giving up on it ("Launch proxy failed") tears the world down
    # under the ranks of the healthy hosts while they are inside MPI's
    # start: MPICH's PMI client crashes (SIGSEGV) or PMI_Init fails (exit
    # 15, MPI_ERR_OTHER). So before such a host is tried again it must open
    # a connection to the launcher's service from there (the agent's reach
    # check, run through the remote shell, as the ranks' agents will); one that
    # cannot is left out again, for longer, and no world is started on it.
    def cannot_reach_back(self, host):
        """Why `host` cannot connect to this launcher's service (the remote
        shell's word on the agent's reach check), or "" when it can or is this machine."""
        if self.service_port is None or is_local_host(host):
            return ""
        address = advertised_address(self.args.network_interface, [(host, 1)])
        connect_s = min(REACH_BACK_S, self.args.ssh_connect_timeout)
        command = (*reach_back_command(), address, str(self.service_port), f"{connect_s:g}")
        failed = unreachable_hosts([(host, 1)], self.args.rsh, self.args.ssh_connect_timeout + connect_s, command)
        return failed[0][1] if failed else ""

    def wait_for_hosts(self):
        """Hosts with at least --min-np slots, waiting up to --elastic-timeout."""
        deadline = time.monotonic() + self.args.elastic_timeout
        last_error, hosts = None, []
        while True:
            try:
                hosts = self.choose(self.discovery.find())
                last_error = None
            except DiscoveryError as exc:
                last_error = exc
            if sum(s for _, s in hosts) >= self.min_np:
                return hosts
            if time.monotonic() >= deadline:
                have = sum(s for _, s in hosts)
                why = f" (last discovery failed: {last_error})" if last_error else ""
                left_out = "".join(f"; {h} cooling down: {w}" for h, w in self.left_out.now().items())
                raise ElasticError(f"--min-np {self.min_np} not reached within --elastic-timeout "
                                   f"{self.args.elastic_timeout:g} s: {have} slot{'s' if have != 1 else ''} "
                                   f"usable on {self.discovery.describe()}{why}{left_out}")
            signal_wait.sleep(self.args.discovery_interval)  # Note [Signals on other threads]

    def watch(self, service):
        """While a world runs: tells its ranks when the usable hosts change,
        at once when a host of theirs is gone (Note [Partitions] in
        world_end.py: it may be cut off, and the next commit would wait for
        it), else at the next commit."""
        announced = False
        while not self.stop_watching.wait(self.args.discovery_interval):
            try:
                found = self.discovery.find()
            except DiscoveryError as exc:
                self.say(f"host discovery failed (hosts kept as they are): {exc}")
                continue
            now = self.usable_now(found)
            listed = {host for host, _ in found}
            gone = [host for host, _ in self.world_hosts if host not in listed]
            if gone:
                self.say(f"hosts changed to {fmt_hosts(now)}: {', '.join(gone)} gone, so the ranks go back to "
                         "their last commit now and a new world starts")
                service.mark_hosts_gone(gone, "host discovery no longer lists it")
                return
            if not announced and sorted(now) != sorted(self.world_hosts):
                self.say(f"hosts changed to {fmt_hosts(now)}: a new world starts at the next commit")
                service.mark_hosts_updated()
                announced = True

    # -- worlds -----------------------------------------------------------------------------
    def run(self):
        """Runs the job; the launcher's exit code."""
        service = DriverService().start()
        try:
            return self._run(service)
        except ElasticError as exc:
            self.say(f"stopping: {exc}")
            return 1
        except KeyboardInterrupt:  # between worlds (waiting for hosts, say); within one the Job handles it
            self.say("interrupted (Ctrl-C): stopping")
            return 130
        finally:
            service.stop()

    def _run(self, service):
        self.service_port = service.port
        resets, number = 0, 0
        stalled, last_progress = 0, -1
        while True:
            hosts = self.wait_for_hosts()
            size = sum(s for _, s in hosts)
            record = service.new_world(number, hosts)
            self.world_hosts = hosts
            env = dict(self.env)
            env[protocol.ENV_DRIVER] = f"{advertised_address(self.args.network_interface, hosts)}:{service.port}"
            env[protocol.ENV_TOKEN] = service.token
            env[protocol.ENV_WORLD] = str(number)
            if env.get(protocol.ENV_CRASH_EXIT) != "0":
                env[protocol.ENV_WORLD_CRASH_EXIT] = str(protocol.EXIT_WORLD_CRASHED)
            if self.args.checkpoint_path:
                env[protocol.ENV_CHECKPOINT] = os.path.abspath(self.args.checkpoint_path)
            command = self.make_command(hosts, size)
            self.say(f"world {number}: {size} rank{'s' if size != 1 else ''} on {fmt_hosts(hosts)}")
            if self.args.verbose:
                self.say(shlex.join(command))
            self.stop_watching.clear()
            watcher = threading.Thread(target=self.watch, args=(service,), daemon=True)
            watcher.start()
            received = []
            # After the user's stop, ranks ending by the signal are not lost
            # ranks: the others must not leave mid-way through whatever they
            # do on an interrupt; ranks that have not ended when the stop is
            # overdue end at once (Note [Bounded stops] in mxplugin_run/job.py).
            job = Job(command, env, self.prog, size, hosts=hosts, received=received,
                      on_interrupt=service.stop_judging, on_stop_overdue=service.stop_ranks,
                      unreached=lambda: left_behind(service), say_ends=self.args.verbose)
            ending = WorldEnd(service, job, number)
            ending.start()
            try:
                code = job.run()
            finally:
                self.stop_watching.set()
                watcher.join()
            if received:  # Ctrl-C, SIGTERM: the user's stop, not a fault
                # The shell's 128 + signal: ranks may end in several ways as
                # they stop (an interrupt swallowed in a destructor, a peer
                # that already stopped), and mpiexec's code says which came
                # last, not what happened.
                return 128 + received[0]
            ending.join()
            service.end_world("mpiexec was abandoned" if job.abandoned else
                              f"mpiexec ended (exit {code}): a host was probably lost")
            service.wait_settled(SETTLE_S, SETTLE_QUIET_S)
            not_started = hosts_not_started(service, record, job.hosts_not_reached())
            if not_started:  # no reset: nothing trained (Note [Hosts a world cannot start on])
                self.say(leave_out_not_started(number, not_started, self.left_out))
                number += 1
                continue
            verdict = self.judge(service, record, code)
            if verdict is None:
                self.say(f"world {number} finished")
                return 0
            progress = service.state_commit()
            stalled = stalled + 1 if progress <= last_progress else 0
            last_progress = max(last_progress, progress)
            if stalled >= MAX_WORLDS_WITHOUT_PROGRESS:
                raise ElasticError(f"{verdict}; {stalled} worlds in a row ended without a new commit, so the "
                                   "job is not getting anywhere")
            resets += 1
            limit = self.args.reset_limit
            if limit is not None and resets > limit:
                raise ElasticError(f"{verdict}; that is reset {resets}, over --reset-limit {limit}")
            self.say(f"{verdict}; reset {resets}" + (f" of at most {limit}" if limit is not None else "")
                     + ", starting a new world")
            number += 1

    def judge(self, service, record, code):
        """None when the job is done, else why a new world starts; raises
        ElasticError when it cannot (Note [One rule for a world's end] in
        rank_ends.py decides; this applies and words it)."""
        with service.lock:
            ends = record.ends()
            started = bool(record.registered or record.exits)
            gone = dict(record.gone)
        resumable = service.state_commit() >= 0 or self.checkpoint_exists()
        outcome = classify(ends, WorldSeen(size=len(ends), gone=gone, mpiexec_code=code, resumable=resumable,
                                           started=started))
        world = f"world {record.number}"
        if outcome.next is Next.STOP:
            raise ElasticError(f"{world}: {stop_reason(outcome, code)}")
        if outcome.next is Next.DONE:
            if outcome.lost_after_done:
                self.say(f"{world}: lost after training finished: {listed(outcome.lost_after_done)}")
            return None
        if outcome.cause is Cause.EVERY_RANK_LOST:
            return f"{world}: every rank was lost; resuming from the newest committed state"
        if outcome.cause is Cause.HOSTS_CHANGED:
            return f"{world}: hosts changed"
        if outcome.cause is Cause.CUT_OFF:
            return f"{world}: ranks lost contact with each other, though none ended"
        first = {x.host: x for x in reversed(outcome.lost) if not x.collateral}  # each blamed host's first
        cooling = {h: self.left_out.leave_out(h, f"rank {first[h].rank} was lost there ({first[h].why})")
                   for h in outcome.blamed}
        text = f"{world}: lost {listed(outcome.lost)}"
        if outcome.kept:
            text += (f" (kept for the next world: {', '.join(outcome.kept)}, whose rank crashed only after a "
                     "peer was lost or the world broken)")
        hosts = sorted({x.host for x in outcome.lost})
        excluded = [f"{h} {describe_cooldown(cooling[h])}" for h in hosts if h in cooling]
        if excluded:
            text += f"; left out: {', '.join(excluded)}"
        if outcome.dropped:
            text += f"; left out while discovery does not list them: {', '.join(outcome.dropped)}"
        return text

    def checkpoint_exists(self):
        """Whether --checkpoint-path names a file that is there."""
        return bool(self.args.checkpoint_path) and os.path.exists(self.args.checkpoint_path)


def listed(lost):
    """'rank 2 on c (signal 9), ...' of Lost records."""
    return ", ".join(f"rank {x.rank} on {x.host} ({x.why})" for x in lost)


def stop_reason(outcome, code):
    """Why the job stops, for the launcher's last line."""
    if outcome.cause is Cause.SCRIPT_ERROR:
        errors = ", ".join(f"rank {e.rank} on {e.host} (exit code {e.code})" for e in outcome.errors)
        return f"{errors}: an error in the training script, not a lost process, so a restart would fail the same way"
    if outcome.cause is Cause.NOTHING_STARTED:
        return "no rank started (see mpiexec's output above)"
    if outcome.cause is Cause.NOTHING_TO_RESUME:
        return ("every rank was lost and there is no committed state to resume from (no survivor handed one "
                "over; --checkpoint-path keeps one on disk)")
    return f"mpiexec exited with {code} and no rank says why"


def fmt_hosts(hosts):
    """[(host, slots)] as 'host:slots,...'."""
    return ",".join(f"{h}:{s}" for h, s in hosts) or "no hosts"
