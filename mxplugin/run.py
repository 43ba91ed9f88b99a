"""mxplugin-run: start a training script on N processes through mpiexec.

A thin wrapper over the mpiexec of the MPI that mxplugin was built with: it
checks the request, translates it into that MPI's flags, sets a few
environment variables for the ranks, and returns the job's exit code.
"""
import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

PROG = "mxplugin-run"
EXIT_USAGE = 2

EPILOG = """\
examples:
  mxplugin-run -np 4 python train.py --epochs 10
  mxplugin-run -np 8 -H server1:4,server2:4 python train.py
  mxplugin-run -np 8 --hostfile hosts.txt python train.py   # lines "server1 slots=4"
  mxplugin-run -np 2 --timeline-filename /tmp/timeline.json python train.py
  mxplugin-run --check-build

Everything from the first word that is not a launcher option onwards is the
command each rank runs. Use "--" to end the launcher options explicitly.
"""


class UsageError(Exception):
    """A request that cannot be launched; the message is shown to the user."""


class _Parser(argparse.ArgumentParser):
    # argparse's default error prints the whole usage block; one line is
    # easier to spot in the output of a job script.
    def error(self, message):
        raise UsageError(message)


def build_parser():
    parser = _Parser(
        prog=PROG,
        description="Run a command on several processes with mxplugin's MPI.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "-np", "--num-proc", dest="num_proc", type=int, metavar="N",
        help="number of processes (ranks) to start; required unless --check-build")
    parser.add_argument(
        "-H", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
        help="hosts and how many ranks each may run, e.g. a:4,b:4 "
             "(default: all ranks on this machine)")
    parser.add_argument(
        "--hostfile", metavar="FILE",
        help="hosts from a file instead of -H: one per line, 'host slots=N', 'host:N' or 'host' "
             "(1 slot); '#' starts a comment")
    parser.add_argument(
        "--rsh", metavar="CMD", default="ssh",
        help="remote shell that starts processes on other hosts (default ssh; given to mpiexec)")
    parser.add_argument(
        "--ssh-connect-timeout", type=float, metavar="SECONDS",
        default=float(os.environ.get("MXPLUGIN_SSH_CONNECT_TIMEOUT", "10")),
        help="before launching, every remote host must answer the remote shell within this "
             "many seconds, else the launch fails naming it and nothing is started "
             "(default 10, or $MXPLUGIN_SSH_CONNECT_TIMEOUT)")
    parser.add_argument(
        "--timeline-filename", dest="timeline", metavar="FILE",
        help="record a timeline of collective operations to FILE "
             "(sets MXPLUGIN_TIMELINE for the ranks)")
    parser.add_argument(
        "--verbose", action="store_true",
        help="print the mpiexec command line and the variables this launcher sets "
             "(OMP_NUM_THREADS: this machine's cores divided by the ranks per host, "
             "unless already set) to stderr, and set MXPLUGIN_LOG_LEVEL=debug unless it is already set")
    parser.add_argument(
        "--check-build", action="store_true",
        help="show what this mxplugin was built with (MPI, CUDA, NCCL, MXNet) and exit")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER,
        help="the program to run on every rank, with its arguments")
    return parser


def parse_args(argv):
    args = build_parser().parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    return args


# ---------------------------------------------------------------- validation

def parse_hosts(spec):
    """'a:2,b:4' -> [('a', 2), ('b', 4)]; raises UsageError when malformed."""
    hosts = []
    for entry in spec.split(","):
        name, sep, slots = entry.strip().partition(":")
        if not name:
            raise UsageError(f"bad host list {spec!r}: empty host name in entry {entry!r}")
        if not sep or not slots:
            raise UsageError(f"bad host list {spec!r}: {entry!r} needs a slot count, as in {name}:2")
        if not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"bad host list {spec!r}: slot count in {entry!r} must be an integer >= 1")
        hosts.append((name, int(slots)))
    return hosts


def parse_hostfile(path):
    """Lines 'host slots=N', 'host:N' or 'host' -> [(host, slots)]."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise UsageError(f"--hostfile {path}: {exc.strerror}") from exc
    hosts = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        name, slots = fields[0], "1"
        if ":" in name:
            name, _, slots = name.partition(":")
        for extra in fields[1:]:
            key, _, value = extra.partition("=")
            if key not in ("slots", "max_slots") or not value:
                raise UsageError(f"--hostfile {path}, line {number}: expected 'host slots=N' or 'host:N', "
                                 f"got {line.strip()!r}")
            if key == "slots":
                slots = value
        if not name or not slots.isdigit() or int(slots) < 1:
            raise UsageError(f"--hostfile {path}, line {number}: bad host or slot count in {line.strip()!r}")
        hosts.append((name, int(slots)))
    if not hosts:
        raise UsageError(f"--hostfile {path} lists no hosts")
    return hosts


def is_local_host(name):
    """Hosts mpiexec starts ranks on without the remote shell."""
    if name in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return socket.gethostbyname(name) in socket.gethostbyname_ex(socket.gethostname())[2] + ["127.0.0.1"]
    except OSError:
        return False


def reach_command(rsh, host, timeout):
    cmd = shlex.split(rsh)
    if os.path.basename(cmd[0]) == "ssh":
        # BatchMode: fail instead of prompting for a password nobody will type.
        cmd += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(round(timeout)))}"]
    return cmd + [host, "true"]


def check_hosts_reachable(hosts, rsh, timeout):
    """Every remote host must run `true` through the remote shell within
    `timeout` seconds (all tried at once); else a UsageError naming the hosts.
    Each try runs in a process session of its own, killed whole on timeout,
    so nothing is left running."""
    remote = [name for name, _ in hosts if not is_local_host(name)]
    tries = {}
    for host in remote:
        try:
            tries[host] = subprocess.Popen(reach_command(rsh, host, timeout), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                           start_new_session=True)
        except OSError as exc:
            raise UsageError(f"cannot run the remote shell {rsh!r}: {exc.strerror}") from exc
    deadline = time.monotonic() + timeout + 2  # ssh's own ConnectTimeout, plus a margin
    failures = []
    for host, proc in tries.items():
        try:
            _, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
            if proc.returncode != 0:
                said = (err or "").strip().splitlines()
                failures.append(f"{host} ({said[-1] if said else f'exit {proc.returncode}'})")
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            failures.append(f"{host} (no answer within {timeout:g} s)")
    if failures:
        raise UsageError(f"cannot reach {', '.join(failures)} with {rsh!r}; -H needs passwordless ssh to every "
                         "host and the same Python and mxplugin paths there (README, 'Using it')")


def check_num_proc(num_proc):
    if num_proc is None:
        raise UsageError("-np N is required (the number of processes to start)")
    if num_proc < 1:
        raise UsageError(f"-np must be at least 1, got {num_proc}")


def check_slots(hosts, num_proc):
    total = sum(slots for _, slots in hosts)
    if total < num_proc:
        raise UsageError(f"-np {num_proc} asks for more ranks than the host list has slots ({total})")


def check_program(command, env):
    if not command:
        raise UsageError("no command given; e.g. mxplugin-run -np 2 python train.py")
    program = command[0]
    if "/" in program:
        if not os.path.isfile(program):
            raise UsageError(f"program not found: {program}")
    elif shutil.which(program, path=env.get("PATH")) is None:
        raise UsageError(f"program not found on PATH: {program}")


# ------------------------------------------------------------- MPI discovery

def load_build_info():
    # _build_info is written by setup.py; a source checkout may not have it.
    try:
        from mxplugin import _build_info
    except ImportError:
        return None
    return _build_info


def is_executable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_mpiexec():
    """The mpiexec of the MPI mxplugin was built with, else the likeliest match."""
    info = load_build_info()
    candidates = [
        getattr(info, "MPIEXEC", None),
        # an MPI installed into the same environment (e.g. the `mpich` wheel)
        os.path.join(os.path.dirname(sys.executable), "mpiexec"),
        shutil.which("mpiexec"),
    ]
    for path in candidates:
        if is_executable(path):
            return path
    raise UsageError("cannot find mpiexec; install an MPI or put its bin directory on PATH")


def mpi_flavour(mpiexec):
    """'openmpi' or 'mpich' (MPICH, Intel MPI and other Hydra-based launchers)."""
    try:
        probe = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        text = probe.stdout + probe.stderr
    except (OSError, subprocess.SubprocessError):
        text = ""
    if "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text:
        return "openmpi"
    if "HYDRA" not in text.upper() and "MPICH" not in text.upper():
        print(f"{PROG}: warning: could not tell which MPI {mpiexec} belongs to; "
              "using MPICH-style arguments", file=sys.stderr)
    return "mpich"


# --------------------------------------------------------- command and env

def rank_environment(args, base_env, hosts=()):
    """The environment the ranks get, and the names this launcher added."""
    env = dict(base_env)
    added = {}
    if args.timeline:
        added["MXPLUGIN_TIMELINE"] = args.timeline
    if args.verbose and "MXPLUGIN_LOG_LEVEL" not in env:
        added["MXPLUGIN_LOG_LEVEL"] = "debug"
    # Each rank's OpenMP pool would otherwise size itself to every core of
    # the machine, so N ranks per machine would run N times too many threads;
    # one thread each would leave cores idle when ranks are fewer than cores.
    # A user's own value always wins.
    if "OMP_NUM_THREADS" not in env:
        added["OMP_NUM_THREADS"] = str(threads_per_rank(args.num_proc, hosts))
    env.update(added)
    return env, added


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ranks_per_host(num_proc, hosts):
    """The most ranks any one host gets: hosts fill in order, each up to its
    slots (how mpiexec places them); all on this machine without -H."""
    if not hosts:
        return num_proc
    most, left = 0, num_proc
    for _, slots in hosts:
        placed = min(slots, left)
        most, left = max(most, placed), left - placed
    return max(most, 1)


def threads_per_rank(num_proc, hosts):
    """This machine's cores divided by the ranks on the busiest host, at
    least 1 (hosts of a -H list are taken to have as many cores as this one)."""
    return max(1, usable_cores() // ranks_per_host(num_proc, hosts))


def names_to_export(env):
    return sorted(name for name in env if name.startswith("MXPLUGIN_") or name == "OMP_NUM_THREADS")


def mpich_arguments(num_proc, hosts, rsh="ssh"):
    # Hydra passes the launcher's whole environment to every rank by default.
    args = ["-n", str(num_proc)]
    if hosts:
        args += ["-hosts", ",".join(f"{name}:{slots}" for name, slots in hosts)]
        if rsh != "ssh":
            args += ["-launcher", "ssh", "-launcher-exec", rsh]
    return args


def openmpi_arguments(num_proc, hosts, env, rsh="ssh"):
    # Without -H, Open MPI allows one rank per core on this machine; to run
    # more, list the slots explicitly (e.g. -H localhost:8) rather than have
    # this launcher pass --oversubscribe behind the user's back.
    args = ["-np", str(num_proc)]
    if hosts:
        args += ["-H", ",".join(f"{name}:{slots}" for name, slots in hosts)]
    if hosts and rsh != "ssh":
        args += ["--mca", "plm_rsh_agent", rsh]
    # Open MPI only forwards the variables named with -x to remote ranks.
    for name in names_to_export(env):
        args += ["-x", name]
    return args


def mpiexec_command(mpiexec, flavour, args, hosts, env):
    if flavour == "openmpi":
        launch = openmpi_arguments(args.num_proc, hosts, env, args.rsh)
    else:
        launch = mpich_arguments(args.num_proc, hosts, args.rsh)
    return [mpiexec] + launch + list(args.command)


# ------------------------------------------------------------------- running

def keyboard_interrupt_reaches_child():
    """True when a Ctrl-C typed at the terminal is delivered to mpiexec too.

    mpiexec shares this process group; if that group is the terminal's
    foreground group, the kernel already sent it the SIGINT. Hydra treats a
    second SIGINT as "force abort", so forwarding would kill the ranks
    instead of letting them shut down.
    """
    try:
        with open("/dev/tty") as tty:
            return os.tcgetpgrp(tty.fileno()) == os.getpgrp()
    except OSError:
        return False


def install_signal_forwarding(child):
    def forward(signum, _frame):
        if signum == signal.SIGINT and keyboard_interrupt_reaches_child():
            return
        child.send_signal(signum)  # a no-op once the child has been reaped

    return {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_signal_handlers(previous):
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def exit_code(returncode):
    # Popen reports death by signal S as -S; shells report it as 128+S.
    return 128 - returncode if returncode < 0 else returncode


def run_child(command, env):
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        raise UsageError(f"cannot start {command[0]}: {exc}") from exc
    previous = install_signal_forwarding(child)
    try:
        return exit_code(child.wait())
    finally:
        restore_signal_handlers(previous)


def launch(args):
    check_num_proc(args.num_proc)
    if args.hosts is not None and args.hostfile is not None:
        raise UsageError("give the hosts with -H or with --hostfile, not both")
    if args.hostfile is not None:
        hosts = parse_hostfile(args.hostfile)
    else:
        hosts = parse_hosts(args.hosts) if args.hosts is not None else []
    if hosts:
        check_slots(hosts, args.num_proc)
        check_hosts_reachable(hosts, args.rsh, args.ssh_connect_timeout)
    env, added = rank_environment(args, os.environ, hosts)
    check_program(args.command, env)
    mpiexec = find_mpiexec()
    command = mpiexec_command(mpiexec, mpi_flavour(mpiexec), args, hosts, env)
    if args.verbose:
        settings = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(added.items()))
        if settings:
            print(f"{PROG}: setting {settings}", file=sys.stderr)
        print(f"{PROG}: {shlex.join(command)}", file=sys.stderr, flush=True)
    return run_child(command, env)


# --------------------------------------------------------------- check-build

def package_version():
    try:
        import mxplugin
        version = getattr(mxplugin, "__version__", None)
        if version:
            return version
        from importlib import metadata
        return metadata.version("mxplugin")
    except Exception:
        return "(version unknown)"


def load_core():
    """(core module, None) or (None, reason it could not be loaded)."""
    try:
        from mxplugin._loader import core_module
    except Exception as exc:  # a missing .so, libmpi or mxnet all land here
        return None, f"{type(exc).__name__}: {exc}"
    return core_module, None


def mpi_line(info):
    """The MPI the ranks will really use: the launcher's mpiexec and the libmpi
    the core loaded (an isolated pip build records no paths of its own)."""
    if info is None:
        return "MPI: unknown (no build info)"
    try:
        mpiexec = find_mpiexec()
    except UsageError as exc:
        mpiexec = f"not found ({exc})"
    try:
        from mxplugin._loader import MPI_LIBRARY as library
    except Exception as exc:  # reported again by the core line
        library = f"not loadable ({type(exc).__name__})"
    return f"MPI: yes (mpiexec: {mpiexec}, library: {library or 'from the linker search path'})"


def cuda_line(info, core):
    built = core.cuda_built() if core is not None else getattr(info, "CUDA_BUILT", None)
    source = "" if core is not None else " (from build info)"
    if built is None:
        return "CUDA: unknown"
    if not built:
        return f"CUDA: no{source}"
    archs = getattr(info, "CUDA_ARCHS", "")
    return f"CUDA: yes (archs {archs.replace(';', ', ') or 'unknown'}){source}"


def nccl_line(info, core):
    """NCCL's version and the libnccl loaded (or recorded), or why not built."""
    recorded = getattr(info, "NCCL_BUILT", None)
    code = core.nccl_built() if core is not None else recorded
    source = "" if core is not None else " (from build info)"
    if code is None:
        return "NCCL: unknown"
    if not code:
        reason = getattr(info, "NCCL_NOT_BUILT_REASON", "")
        return f"NCCL: no ({reason}){source}" if reason else f"NCCL: no{source}"
    library = None
    if core is not None:
        from mxplugin._loader import NCCL_LIBRARY as library
    library = library or getattr(info, "NCCL_LIBRARY", "") or "from the linker search path"
    version = getattr(info, "NCCL_VERSION", "") if recorded == code else ""
    line = f"NCCL: yes ({version or f'version code {code}'}, {library}){source}"
    if recorded is not None and recorded != code:
        line += f"; the build info says {recorded or 'no NCCL'}: rebuild mxplugin"
    return line


def mxnet_line(info):
    if info is not None and not getattr(info, "MXNET_BUILT", True):
        return "MXNet: no (core-only build)"
    built = getattr(info, "MXNET_VERSION", None)
    # _loader imports mxnet; report a mismatch with what is installed now.
    running = getattr(sys.modules.get("mxnet"), "__version__", None)
    if built and running and built != running:
        return f"MXNet: yes (built against {built}, installed {running})"
    return f"MXNet: yes ({built or running or 'version unknown'})"


def check_build():
    info = load_build_info()
    core, core_error = load_core()
    lines = [
        f"mxplugin {package_version()}",
        mpi_line(info),
        cuda_line(info, core),
        nccl_line(info, core),
        mxnet_line(info),
    ]
    if core_error:
        lines.append(f"core: not loadable ({core_error})")
    print("\n".join(lines))
    return 0


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help has been printed
        return exc.code or 0
    except UsageError as exc:
        print(f"{PROG}: error: {exc} (see {PROG} --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.check_build:
            return check_build()
        return launch(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
