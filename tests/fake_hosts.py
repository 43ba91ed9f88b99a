"""Several NCCL ranks on one GPU, each rank a host of its own (GPU.md).

NCCL refuses two ranks on one GPU ("Duplicate GPU detected") unless it
believes they run on different nodes. MPICH's launcher starts one proxy per
host through "ssh"; given the script below in place of ssh, every fake host
gets a proxy on this machine whose ranks see NCCL_HOSTID=<host>, so NCCL
treats them as separate nodes and connects them over sockets on loopback,
and MPI reports local_rank 0 and local_size 1 on each (so each takes GPU 0).

Chosen automatically when the ranks outnumber the GPUs; the environment
variable MXPLUGIN_TEST_FAKE_HOSTS=1 forces it (to try it on a machine with
enough GPUs), =0 forbids it (tests that need it then skip)."""
import os
import subprocess

FAKESSH = """#!/bin/sh
# fakessh: MPICH's launcher calls it as `fakessh [options] HOST COMMAND...`
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
NCCL_HOSTID="$host"; NCCL_SOCKET_IFNAME=lo; export NCCL_HOSTID NCCL_SOCKET_IFNAME
exec sh -c "$*"
"""
SWITCH = "MXPLUGIN_TEST_FAKE_HOSTS"


def write_fakessh(directory):
    """Writes the launcher script into `directory`; returns its path."""
    path = os.path.join(directory, "fakessh")
    with open(path, "w") as f:
        f.write(FAKESSH)
    os.chmod(path, 0o755)
    return path


def host_names(ranks):
    return [f"fakehost{i + 1}" for i in range(ranks)]


def launcher_is_hydra(mpiexec):
    """Fake hosts need MPICH's launcher (Hydra): Open MPI has no -launcher-exec."""
    try:
        probe = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in (probe.stdout + probe.stderr).upper()


def launch_options(ranks, gpus, mpiexec, fakessh):
    """(mpiexec options, "") that run `ranks` NCCL ranks on this machine with
    `gpus` GPUs: none when every rank has a GPU of its own (and fake hosts are
    not forced), one fake host per rank otherwise; (None, why) when neither
    can be done."""
    switch = os.environ.get(SWITCH, "").strip().lower()
    if switch not in ("", "0", "1"):
        return None, f"{SWITCH}={switch}: expected 1 (force fake hosts), 0 (never) or unset (when needed)"
    if gpus < 1:
        return None, "needs a GPU"
    if ranks <= gpus and switch != "1":
        return [], ""
    if switch == "0":
        return None, f"needs {ranks} GPUs (one per rank), this machine has {gpus}, and {SWITCH}=0 forbids fake hosts"
    if not launcher_is_hydra(mpiexec):
        return None, (f"needs {ranks} GPUs (one per rank), this machine has {gpus}, and fake hosts need "
                      f"MPICH's launcher; {mpiexec} is not Hydra")
    hosts = ",".join(f"{name}:1" for name in host_names(ranks))
    return ["-launcher", "ssh", "-launcher-exec", fakessh, "-hosts", hosts], ""
