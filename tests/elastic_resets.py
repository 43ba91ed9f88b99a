"""The elastic launcher through many worlds, to see that its own resources
stay flat: python tests/elastic_resets.py WORLDS.

The launcher's code runs as in mxplugin-run (ElasticDriver, its service,
its Job, watcher and world-end threads); each world's command is a small
program playing both ranks of a world (register, hand a newer state over,
leave because the hosts changed; the last world's ranks leave done) in
place of mpiexec, so a world takes a fraction of a second. At the start of
each world the launcher's resident memory, descriptors and threads are
noted; after a warm-up they must stay within 5 % (descriptors and threads:
no more than after the warm-up, once the last world's request threads have
ended). Prints "resets: ..." with the figures; exits 1 with the reason
when they grew."""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mxplugin_run.elastic.driver import ElasticDriver  # noqa: E402
from mxplugin_run.protocol import ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER  # noqa: E402

WARM_UP_WORLDS = 5
SLACK = 0.05
SETTLE_S = 60  # at most this for a world's last request threads to end (they do at once)

RANKS = r"""
import os, sys, urllib.request
last, ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER = int(sys.argv[1]), *sys.argv[2:]
world = int(os.environ[ENV_WORLD])
def ask(method, path, body=None):
    url = f"http://{os.environ[ENV_DRIVER]}{path}"
    req = urllib.request.Request(url, data=body, method=method, headers={TOKEN_HEADER: os.environ[ENV_TOKEN]})
    urllib.request.urlopen(req, timeout=60).read()
for rank in (0, 1):
    ask("POST", f"/register?world={world}&rank={rank}&pid={os.getpid()}")
ask("PUT", f"/state?world={world}&rank=0&commit={world}", b"state of world %d" % world)
for rank in (0, 1):
    ask("POST", f"/leave?world={world}&rank={rank}&reason={'done' if world == last else 'hosts'}")
"""


def resources():
    # Anonymous memory: what a leak grows (tests/spmd/check_flat_resources.py says why not VmRSS)
    with open("/proc/self/status") as f:
        kb = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith("Rss")}
    return {"anon_mb": kb["RssAnon"] / 1024, "fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count()}


def settled(base):
    """This process's resources once descriptors and threads are back to
    `base`'s counts, or as they are after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = resources()
        if base is None or (now["fds"] <= base["fds"] and now["threads"] <= base["threads"]):
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("worlds", type=int)
    worlds = parser.parse_args().worlds
    args = argparse.Namespace(host_discovery_script=None, static_hosts=[("localhost", 2)], max_np=2, min_np=2,
                              num_proc=None, checkpoint_path=None, blacklist_cooldown_range=None, rsh="ssh",
                              ssh_connect_timeout=10, elastic_timeout=60.0, discovery_interval=1.0,
                              network_interface=None, verbose=False, reset_limit=None)
    looks = []

    def world_command(hosts, size):
        # Called as each world starts: the launcher between worlds.
        looks.append(settled(looks[WARM_UP_WORLDS] if len(looks) > WARM_UP_WORLDS else None))
        # The protocol's names as arguments: importing mxplugin's package would load MXNet, seconds a world.
        return [sys.executable, "-S", "-c", RANKS, str(worlds - 1), ENV_DRIVER, ENV_TOKEN, ENV_WORLD, TOKEN_HEADER]

    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ElasticDriver(args, env, "resets", world_command).run()
    if code != 0 or len(looks) != worlds:
        sys.exit(f"resets: the launcher exited {code} after {len(looks)} of {worlds} worlds")
    base, last = looks[WARM_UP_WORLDS], looks[-1]
    peak = {k: max(look[k] for look in looks[WARM_UP_WORLDS:]) for k in base}
    print(f"resets: {worlds - 1} resets; launcher after {WARM_UP_WORLDS} worlds {base}, at the last {last}, "
          f"peak {peak}", flush=True)
    grew = peak["anon_mb"] / base["anon_mb"] - 1
    if grew > SLACK or peak["fds"] > base["fds"] or peak["threads"] > base["threads"]:
        sys.exit(f"resets: the launcher grew: memory {grew:.1%}, descriptors {base['fds']} -> {peak['fds']}, "
                 f"threads {base['threads']} -> {peak['threads']}")


if __name__ == "__main__":
    main()
