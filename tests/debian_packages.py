"""Debian packages some tests need (Open MPI 4.1, Slurm, munge), installed
on demand: CI's machine has only what the repository installs, and these
come from apt, not pip. Installed only as root on a machine with apt-get;
elsewhere the tests say why they skip. Installing starts no service (the
tests run their own daemons, with files of their own)."""
import fcntl
import os
import shutil
import subprocess

APT_LOCK = "/tmp/mxplugin-apt.lock"
_tried = {}


def ensure(packages, present):
    """None once `present()` is true, installing `packages` with apt-get if
    needed (once per process); else why they cannot be had."""
    if present():
        return None
    key = tuple(packages)
    if key in _tried:
        return _tried[key]
    # One install at a time on the machine: two test processes (pytest's
    # workers, tests/conftest.py) may ask at once, and the one that lost
    # apt's lock would skip its tests. The one that waited finds them there.
    with open(APT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        why = None if present() else _install(packages)
    _tried[key] = why if why or present() else f"apt-get install {' '.join(packages)} left them missing"
    return _tried[key]


def _install(packages):
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"needs the Debian packages {', '.join(packages)} (apt-get install, as root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:  # stale or missing package lists: fetch them once, then try again
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {(done.stderr or done.stdout)[-400:]}"
    return None
