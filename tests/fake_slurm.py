"""A real Slurm cluster on fake hosts: Debian's slurmctld on the first fake
host, one slurmd per fake host (`slurmd -N <host>` in its namespace), and
a munged of the cluster's own (its own key and socket), all configured in
the cluster's directory and stopped with it. Jobs are submitted from the
first host with the cluster's slurm.conf (SLURM_CONF in env()).

Needs root, `ip` and the packages slurm-wlm and munge (installed when
missing, tests/debian_packages.py); FakeSlurm.unavailable() says why not. Nothing of the machine's own Slurm or munge is used or touched:
every file, port and socket is this cluster's."""
import os
import shutil
import signal
import socket
import subprocess
import time

from debian_packages import ensure
from fake_cluster import FakeCluster

PROGRAMS = ("slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel", "sinfo", "munged", "mungekey")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin")

SLURM_CONF = """\
ClusterName=mx{id}
SlurmctldHost={ctl_host}({ctl_addr})
SlurmctldPort={ctl_port}
SlurmdPort={node_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.%n.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MessageTimeout=20
{nodes}
PartitionName=fake Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


# slurmd loads a cgroup plugin whatever the task and tracking plugins are;
# its autodetection fails on a hybrid v1 mount (a tmpfs at /sys/fs/cgroup).
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
"""


def _find(program):
    found = shutil.which(program)
    if found:
        return found
    for d in SBIN:
        if os.path.exists(os.path.join(d, program)):
            return os.path.join(d, program)
    return None


class FakeSlurm:
    @staticmethod
    def unavailable():
        why = FakeCluster.unavailable()
        if why:
            return why
        return ensure(["slurm-wlm", "munge"], lambda: all(_find(p) for p in PROGRAMS))

    def __init__(self, num_hosts, cpus_per_host=2):
        self.cluster = FakeCluster(num_hosts)
        self.cpus = cpus_per_host
        self.daemons = []

    @property
    def hosts(self):
        return self.cluster.hosts

    def __enter__(self):
        try:
            self.cluster.__enter__()
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, name):
        return os.path.join(self.cluster.dir, name)

    def env(self, extra=None):
        """The environment of a client (srun, sbatch) run on the first host."""
        env = dict(os.environ)
        for name in [n for n in env if n.startswith("SLURM_")]:  # not this process's allocation, if any
            del env[name]
        env["SLURM_CONF"] = self.path("slurm.conf")
        env.update(extra or {})
        return env

    def start(self):
        c = self.cluster
        for d in ["state", "munge"] + [f"spool/{h}" for h in c.hosts]:
            os.makedirs(self.path(d), exist_ok=True)
        os.chmod(self.path("munge"), 0o700)
        key, munge_socket = self.path("munge/munge.key"), self.path("munge/munge.socket")
        subprocess.run([_find("mungekey"), "--create", "--keyfile", key], check=True, capture_output=True)
        # munged in the first host: its socket is a file, so it serves every namespace
        self._daemon(0, [_find("munged"), "--foreground", "--force", "--key-file", key, "--socket", munge_socket,
                         "--pid-file", self.path("munge/munged.pid"), "--log-file", self.path("munge/munged.log"),
                         "--seed-file", self.path("munge/munged.seed")])
        self._wait_for(lambda: os.path.exists(munge_socket), "munged's socket")
        port = 17000 + int(c.id) % 2000 * 2
        nodes = "\n".join(f"NodeName={h} NodeAddr={c.address(i)} CPUs={self.cpus} State=UNKNOWN"
                          for i, h in enumerate(c.hosts))
        with open(self.path("slurm.conf"), "w") as f:
            # slurmctld runs only where SlurmctldHost names this machine's host name
            f.write(SLURM_CONF.format(id=c.id, ctl_host=socket.gethostname(), ctl_addr=c.address(0), ctl_port=port,
                                      node_port=port + 1, munge_socket=munge_socket, dir=c.dir, nodes=nodes))
        with open(self.path("cgroup.conf"), "w") as f:
            f.write(CGROUP_CONF)
        env = self.env()
        self._daemon(0, [_find("slurmctld"), "-D", "-i", "-f", self.path("slurm.conf")], env)
        for i, host in enumerate(c.hosts):
            self._daemon(i, [_find("slurmd"), "-D", "-N", host, "-f", self.path("slurm.conf")], env)
        self._wait_for(self._all_idle, "every node idle in sinfo", timeout=90)

    def _daemon(self, host_index, argv, env=None):
        log = open(self.path(f"{os.path.basename(argv[0])}.{host_index}.out"), "w")
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host_index], *argv], stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.daemons.append(proc)
        return proc

    def _all_idle(self):
        out = self.run([_find("sinfo"), "-h", "-N", "-o", "%N %t"], timeout=30)
        states = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
        return len(states) == len(self.hosts) and all(s.rstrip("*") == "idle" for s in states.values())

    def _wait_for(self, predicate, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.daemons:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon ({proc.args[3:5]}) exited {proc.returncode} waiting for "
                                       f"{what}:\n{self.logs()}")
            if predicate():
                return
            time.sleep(0.3)
        raise RuntimeError(f"no {what} after {timeout} s:\n{self.logs()}")

    def logs(self):
        text = []
        for name in sorted(os.listdir(self.cluster.dir)):
            if name.endswith((".log", ".out")):
                with open(self.path(name), errors="replace") as f:
                    text.append(f"--- {name}\n{f.read()[-2000:]}")
        return "\n".join(text)

    def run(self, argv, env=None, timeout=120, cwd=None):
        """A client command on the first host. One that times out is killed
        with its job steps; the daemons stay, for the tests after it."""
        return self.cluster.run(0, argv, env=self.env(env), timeout=timeout, cwd=cwd,
                                spare={proc.pid for proc in self.daemons})

    def start_client(self, argv, env=None, cwd=None):
        return self.cluster.start(0, argv, env=self.env(env), cwd=cwd)

    def stop(self):
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.daemons:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.cluster.__exit__(None, None, None)
