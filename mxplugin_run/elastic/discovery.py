"""Where an elastic job may run: a fixed host list (-H, --hostfile), or a
discovery script the launcher runs again and again, which prints the hosts
available now, one per line: "host:slots" or "host" (one slot)."""
import subprocess

from mxplugin_run.hosts import UsageError, parse_hosts
from mxplugin_run.placement import place_ranks
from mxplugin_run.timeouts import SCRIPT_TIMEOUT_S


class DiscoveryError(Exception):
    pass


class FixedHosts:
    def __init__(self, hosts):
        self.hosts = list(hosts)

    def find(self):
        return list(self.hosts)

    def describe(self):
        return ",".join(f"{h}:{s}" for h, s in self.hosts)


class DiscoveryScript:
    def __init__(self, script, default_slots=None):
        self.script = script
        self.default_slots = default_slots or 1  # of a host printed without a count (--slots-per-host)

    def describe(self):
        return f"discovery script {self.script}"

    def find(self):
        try:
            done = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                  timeout=SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise DiscoveryError(f"{self.script} did not finish within {SCRIPT_TIMEOUT_S} s") from exc
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()
            raise DiscoveryError(f"{self.script} exited with {done.returncode}"
                                 + (f": {said[-1]}" if said else ""))
        return parse_discovered(done.stdout, self.script, self.default_slots)


def parse_discovered(text, source, default_slots=1):
    hosts = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            hosts += parse_hosts(entry if ":" in entry else f"{entry}:{default_slots}")
        except UsageError as exc:
            raise DiscoveryError(f"{source} printed {line.strip()!r}: {exc}") from exc
    merged = {}
    for host, slots in hosts:  # a host listed twice: its larger count
        merged[host] = max(slots, merged.get(host, 0))
    return list(merged.items())


def usable(hosts, excluded, max_np):
    """The hosts not excluded, in order, with slots cut so the total is at
    most max_np (None: no limit): where a world of that many ranks is placed."""
    return place_ranks([(host, slots) for host, slots in hosts if host not in excluded], max_np)
