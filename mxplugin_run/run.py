"""mxplugin-run: start a training script on N processes through mpiexec.

A thin wrapper over the mpiexec of the MPI that mxplugin was built with: it
checks the request, translates it into that MPI's flags, sets a few
environment variables for the ranks, and returns the job's exit code.
"""
import argparse
import os
import shlex
import shutil
import sys

from mxplugin_run import horovodrun_options
from mxplugin_run.hosts import (UsageError, check_hosts_reachable, check_slots, parse_hostfile, parse_hosts,
                            threads_per_rank)
from mxplugin_run.job import run_job
from mxplugin_run.mpi_launcher import find_mpiexec, mpi_flavour, mpich_arguments, openmpi_arguments
from mxplugin_run.slurm import allocation_hosts

PROG = "mxplugin-run"
EXIT_USAGE = 2

EPILOG = """\
examples:
  mxplugin-run -np 4 python train.py --epochs 10
  mxplugin-run -np 8 -H server1:4,server2:4 python train.py
  mxplugin-run -np 8 --hostfile hosts.txt python train.py   # lines "server1 slots=4"
  mxplugin-run -np 2 --timeline-filename /tmp/timeline.json python train.py
  mxplugin-run -np 2 --prefix-output python train.py   # lines start "[0]<stdout>:"
  mxplugin-run --min-np 2 --max-np 4 -H a:2,b:2 python train.py   # elastic
  mxplugin-run --min-np 2 --host-discovery-script ./hosts.sh python train.py
  mxplugin-run --check-build
  mxplugin-run -np 4 --fusion-threshold-mb 32 --cycle-time-ms 5 python train.py   # horovodrun's options

Everything from the first word that is not a launcher option onwards is the
command each rank runs. Use "--" to end the launcher options explicitly.
"""


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
        "--network-interface", metavar="IFACE", default=os.environ.get("MXPLUGIN_NETWORK_INTERFACE") or None,
        help="network interface the ranks talk over, e.g. eth0 or ib0 (the same name on every host): "
             "given to mpiexec (-iface; Open MPI: btl/oob_tcp_if_include) and to MPI's UCX transport "
             "(UCX_NET_DEVICES, unless set); default $MXPLUGIN_NETWORK_INTERFACE, else MPI's own choice")
    parser.add_argument(
        "--ssh-connect-timeout", type=float, metavar="SECONDS",
        default=float(os.environ.get("MXPLUGIN_SSH_CONNECT_TIMEOUT", "10")),
        help="before launching, every remote host must answer the remote shell within this "
             "many seconds, else the launch fails naming it and nothing is started "
             "(default 10, or $MXPLUGIN_SSH_CONNECT_TIMEOUT)")
    elastic = parser.add_argument_group(
        "elastic training",
        "with any of these the job survives lost ranks and changed hosts: the script uses "
        "mxplugin.elastic.run and a State (docs/guides/elastic.md)")
    elastic.add_argument(
        "--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
        help="fewest ranks to train with; a new world waits for this many slots (default: -np, else 1)")
    elastic.add_argument(
        "--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
        help="most ranks to train with (default: -np, else every slot the hosts have)")
    elastic.add_argument(
        "--host-discovery-script", metavar="SCRIPT",
        help="a command printing the hosts available now, one 'host:slots' per line; run every "
             "--discovery-interval seconds (instead of -H or --hostfile)")
    elastic.add_argument(
        "--reset-limit", type=int, metavar="K",
        help="stop the job rather than start a (K+1)th new world (default: no limit); a world that could not "
             "start on some host, which trained nothing, does not count")
    elastic.add_argument(
        "--elastic-timeout", type=float, metavar="SECONDS", default=600.0,
        help="how long a new world waits for --min-np slots before the job stops (default 600)")
    elastic.add_argument(
        "--discovery-interval", type=float, metavar="SECONDS", default=1.0,
        help="seconds between runs of the discovery script (default 1)")
    elastic.add_argument(
        "--blacklist-cooldown-range", nargs=2, metavar=("MIN", "MAX"),
        help="a host whose rank was lost is left out of new worlds for MIN seconds, twice as long "
             "each time it fails again, at most MAX, then tried again (default 30 600; 'inf inf': "
             "for good)")
    elastic.add_argument(
        "--checkpoint-path", metavar="FILE",
        help="rank 0 also writes each committed state here; a new world starts from it when no rank "
             "of the last world survived to hand the state over")
    parser.add_argument(
        "--prefix-output", action="store_true",
        help="start every line a rank prints with its rank, as horovodrun does: '[1]<stdout>:' "
             "or '[1]<stderr>:' (lines are kept whole either way)")
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
    horovodrun_options.add_options(parser)  # Note [horovodrun's options]
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

def check_num_proc(num_proc):
    if num_proc is None:
        raise UsageError("-np N is required (the number of processes to start)")
    if num_proc < 1:
        raise UsageError(f"-np must be at least 1, got {num_proc}")


def check_program(command, env):
    if not command:
        raise UsageError("no command given; e.g. mxplugin-run -np 2 python train.py")
    program = command[0]
    if "/" in program:
        if not os.path.isfile(program):
            raise UsageError(f"program not found: {program}")
    elif shutil.which(program, path=env.get("PATH")) is None:
        raise UsageError(f"program not found on PATH: {program}")


# --------------------------------------------------------- command and env

def rank_environment(args, base_env, hosts=()):
    """The environment the ranks get, and the names this launcher added."""
    env = dict(base_env)
    added = dict(getattr(args, "horovod_variables", {}))  # horovodrun's options, over inherited values
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
    # MPICH's and Open MPI's UCX transport picks its devices itself: on a
    # host with several networks it may pick one the others cannot reach.
    if args.network_interface and "UCX_NET_DEVICES" not in env:
        added["UCX_NET_DEVICES"] = args.network_interface
    # Intel MPI's ranks spin while they wait in MPI; ours run more busy
    # threads than cores (MXNet's, mxplugin's): on 2 cores, 2 hosts x 2
    # ranks reduced resnet50's gradients in 1348 ms spinning and in 95 ms
    # waiting (Note [Open MPI's defaults] in mpi_launcher.py has the same for
    # Open MPI). Other MPIs ignore the variable.
    if "I_MPI_WAIT_MODE" not in env:
        added["I_MPI_WAIT_MODE"] = "1"
    env.update(added)
    return env, added


def rank_agent(args, elastic=False):
    """What goes before each rank's command: its agent (Note [A rank's
    agent] in rank_agent.py), with the same Python as the ranks on every
    host; the launcher's package costs no MXNet import."""
    return ([sys.executable, "-m", "mxplugin_run.rank_agent"] + (["--prefix"] if args.prefix_output else [])
            + (["--timestamp"] if getattr(args, "prefix_output_with_timestamp", False) else [])
            + (["--output-dir", os.path.abspath(args.output_filename)] if getattr(args, "output_filename", None)
               else [])
            + (["--elastic"] if elastic else []) + ["--"])


def mpiexec_command(mpiexec, flavour, args, hosts, env):
    if flavour == "openmpi":
        launch = openmpi_arguments(args.num_proc, hosts, env, args.rsh, args.network_interface)
    else:
        launch = mpich_arguments(args.num_proc, hosts, args.rsh, args.network_interface)
    return [mpiexec] + launch + getattr(args, "mpi_extra", []) + rank_agent(args) + list(args.command)


# ------------------------------------------------------------------- running

def run_child(command, env, num_proc, hosts=(), verbose=False):
    try:
        return run_job(command, env, PROG, num_proc, hosts=hosts, say_ends=verbose)
    except OSError as exc:
        raise UsageError(f"cannot start {command[0]}: {exc}") from exc


def is_elastic(args):
    return args.min_np is not None or args.max_np is not None or args.host_discovery_script is not None


def launch_elastic(args, hosts):
    from mxplugin_run.elastic.cooldown import parse_cooldown_range
    from mxplugin_run.elastic.driver import ElasticDriver

    if args.host_discovery_script and hosts:
        raise UsageError("give the hosts with --host-discovery-script or with -H/--hostfile, not both")
    for name in ("num_proc", "min_np", "max_np"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.min_np is not None and args.max_np is not None and args.min_np > args.max_np:
        raise UsageError(f"--min-np {args.min_np} is more than --max-np {args.max_np}")
    if args.reset_limit is not None and args.reset_limit < 0:
        raise UsageError(f"--reset-limit must be at least 0, got {args.reset_limit}")
    if args.blacklist_cooldown_range is not None:
        try:
            args.blacklist_cooldown_range = parse_cooldown_range(args.blacklist_cooldown_range)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if not args.host_discovery_script and not hosts:
        hosts = [("localhost", args.max_np or args.num_proc or args.min_np)]
    args.static_hosts = hosts
    most = args.max_np or args.num_proc or sum(s for _, s in hosts) or 1
    env, added = rank_environment(argparse.Namespace(**{**vars(args), "num_proc": most}), os.environ, hosts)
    if "MXPLUGIN_PEER_TIMEOUT_SECONDS" not in env:  # Note [Partitions] in mxplugin_run/elastic/world_end.py
        from mxplugin_run.timeouts import ELASTIC_PEER_TIMEOUT_S

        env["MXPLUGIN_PEER_TIMEOUT_SECONDS"] = added["MXPLUGIN_PEER_TIMEOUT_SECONDS"] = str(ELASTIC_PEER_TIMEOUT_S)
    from mxplugin_run.protocol import SURVIVOR_MPI_ENV  # Note [Single copy in elastic jobs]

    for name, value in SURVIVOR_MPI_ENV.items():
        if name not in env:
            env[name] = added[name] = value
    check_program(args.command, env)
    mpiexec = find_mpiexec()
    if mpi_flavour(mpiexec) != "mpich":
        raise UsageError(f"elastic training needs an MPICH-family launcher (Hydra's mpiexec, which keeps the "
                         f"survivors running when a rank is lost); {mpiexec} is Open MPI's. Build mxplugin "
                         f"against MPICH (the default: pip install without MPICC) for elastic jobs")
    if args.verbose:
        settings = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(added.items()))
        if settings:
            print(f"{PROG}: setting {settings}", file=sys.stderr)

    def world_command(world_hosts, size):
        # -disable-auto-cleanup: a lost rank must not take the survivors
        # (and the state they hold) down with it.
        return ([mpiexec] + mpich_arguments(size, world_hosts, args.rsh, args.network_interface)
                + ["-disable-auto-cleanup"] + getattr(args, "mpi_extra", []) + rank_agent(args, elastic=True) + list(args.command))

    return ElasticDriver(args, env, PROG, world_command).run()


def slurm_hosts(args):
    """Without -H or --hostfile inside a Slurm allocation (salloc, sbatch):
    its nodes and task counts; else [] (this machine)."""
    hosts = allocation_hosts(os.environ) or []
    if hosts and args.verbose:
        listed = ",".join(f"{name}:{slots}" for name, slots in hosts)
        print(f"{PROG}: hosts from the Slurm allocation {os.environ.get('SLURM_JOB_ID')}: {listed}", file=sys.stderr)
    return hosts


def launch(args):
    args.horovod_variables = horovodrun_options.apply(args)  # Note [horovodrun's options]
    if is_elastic(args):
        if args.hosts is not None and args.hostfile is not None:
            raise UsageError("give the hosts with -H or with --hostfile, not both")
        hosts = parse_hostfile(args.hostfile, args.slots_per_host) if args.hostfile is not None else (
            parse_hosts(args.hosts, args.slots_per_host) if args.hosts is not None else [])
        return launch_elastic(args, hosts)
    if args.blacklist_cooldown_range is not None:
        raise UsageError("--blacklist-cooldown-range is for elastic jobs (--min-np, --max-np or "
                         "--host-discovery-script): a plain job leaves no host out")
    check_num_proc(args.num_proc)
    if args.hosts is not None and args.hostfile is not None:
        raise UsageError("give the hosts with -H or with --hostfile, not both")
    from_slurm = args.hostfile is None and args.hosts is None
    if args.hostfile is not None:
        hosts = parse_hostfile(args.hostfile, args.slots_per_host)
    else:
        hosts = parse_hosts(args.hosts, args.slots_per_host) if args.hosts is not None else slurm_hosts(args)
    if hosts:
        check_slots(hosts, args.num_proc)
        # Inside an allocation the MPI launcher starts its daemons with srun
        # (Hydra and Open MPI both detect Slurm), not through a remote shell.
        if not from_slurm:
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
    return run_child(command, env, args.num_proc, hosts, verbose=args.verbose)


def version():
    """The installed mxplugin's version (this launcher ships with it)."""
    from importlib import metadata

    try:
        return metadata.version("mxplugin")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help has been printed
        return exc.code or 0
    except UsageError as exc:
        print(f"{PROG}: error: {exc} (see {PROG} --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.version:
            print(f"{PROG} {version()}")
            return 0
        if args.check_build:
            from mxplugin_run.build_report import check_build

            return check_build()
        return launch(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
