"""The options of horovodrun 0.28.1 that mxplugin-run takes besides its own,
so that a Horovod job script's launch line runs unchanged (Note
[horovodrun's options]); its --config-file too.

Note [horovodrun's options]: every option horovodrun 0.28.1 has is here,
one of two kinds:
- mapped: it sets, for the ranks, the MXPLUGIN_* variable that its
  HOROVOD_* twin is the alias of (over an inherited value, as horovodrun's
  option does), or does here what it does there (--version, --ssh-port,
  --output-filename, --mpi-args, ...);
- refused at once, with one line naming it and why (Gloo, jsrun, torus
  allreduce, the autotuner's Bayesian knobs): a job that asks for what
  mxplugin does not have must not start as if it had it.
The same table serves the options and --config-file's YAML keys, and the
options win over the file, as with horovodrun."""
import argparse
import shlex

from mxplugin_run.hosts import UsageError

MB = 1 << 20


class Refused(argparse.Action):
    """An option horovodrun has and mxplugin-run refuses, saying why."""

    def __init__(self, option_strings, dest, why="", nargs=0, **kwargs):
        self.why = why
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        raise UsageError(f"{option_string}: {self.why}")


GLOO = "mxplugin runs over MPI (and NCCL between GPUs), not Gloo: drop it"
REFUSED = {
    "--gloo": (0, GLOO),
    "--gloo-timeout-seconds": (1, GLOO),
    "--jsrun": (0, "LSF's jsrun is not supported: list the hosts with -H or --hostfile (or run inside a Slurm "
                   "allocation)"),
    "--torus-allreduce": (0, "mxplugin has no torus allreduce; its allreduce goes through shared memory within a "
                             "host and MPI across hosts (--hierarchical-allreduce)"),
    "--hierarchical-allgather": (0, "mxplugin's allgather has no hierarchical variant"),
    "--autotune-bayes-opt-max-samples": (1, "mxplugin's autotune tries a fixed set of bucket sizes, with no "
                                            "Bayesian optimization (docs/guides/training.md)"),
    "--autotune-gaussian-process-noise": (1, "mxplugin's autotune tries a fixed set of bucket sizes, with no "
                                             "Bayesian optimization (docs/guides/training.md)"),
    "--thread-affinity": (1, "mxplugin does not pin its background thread; bind the ranks with --binding-args"),
}
# Options of horovodrun that take nothing away and mean no change here.
ACCEPTED_AS_IS = {
    "--mpi": "mxplugin always runs over MPI",
    "--no-torus-allreduce": "mxplugin has no torus allreduce",
    "--no-hierarchical-allgather": "mxplugin's allgather is never hierarchical",
    "--log-without-timestamp": "mxplugin's log lines carry no timestamp",
    "--log-hide-timestamp": "mxplugin's log lines carry no timestamp",
}


def _flag_pair(group, name, dest, help_on, help_off=None):
    group.add_argument(f"--{name}", dest=dest, action="store_const", const=True, default=None, help=help_on)
    group.add_argument(f"--no-{name}", dest=dest, action="store_const", const=False,
                       help=help_off or argparse.SUPPRESS)


def add_options(parser):
    """horovodrun's options, grouped as horovodrun groups them."""
    parser.add_argument("-v", "--version", action="store_true", help="print the version and exit")
    hosts = parser.add_argument_group("horovodrun's host and launch options")
    hosts.add_argument("-p", "--ssh-port", type=int, metavar="PORT",
                       help="ssh port on every host (given to the remote shell: ssh -p PORT)")
    hosts.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                       help="ssh identity file (given to the remote shell: ssh -i FILE)")
    hosts.add_argument("--start-timeout", type=float, metavar="SECONDS",
                       help="as --ssh-connect-timeout: every host must answer within this long")
    hosts.add_argument("--network-interfaces", metavar="IFACE",
                       help="as --network-interface (one name: MPI talks over one interface)")
    hosts.add_argument("--output-filename", metavar="DIR",
                       help="also write each rank's output to DIR/rank.<rank>/stdout and stderr (rank zero-padded "
                            "to the width of the largest)")
    hosts.add_argument("--config-file", metavar="FILE",
                       help="horovodrun's YAML configuration (params, autotune, timeline, stall_check, "
                            "library_options, logging); options on the command line win")
    hosts.add_argument("--slots-per-host", type=int, metavar="N",
                       help="slots of a host given without a count (-H a,b; --hostfile; discovery)")
    hosts.add_argument("--mpi-args", metavar="ARGS", help="extra arguments for mpiexec, as one string")
    hosts.add_argument("--binding-args", metavar="ARGS",
                       help="process binding arguments for mpiexec, as one string")
    hosts.add_argument("--tcp", action="store_true",
                       help="MPI talks between hosts over TCP only (UCX_TLS=tcp,sm,self; Open MPI: the tcp BTL)")
    tune = parser.add_argument_group("horovodrun's tuneable parameters (the ranks' MXPLUGIN_* variables)")
    tune.add_argument("--fusion-threshold-mb", type=float, metavar="MB", help="MXPLUGIN_FUSION_THRESHOLD, in MB")
    tune.add_argument("--cycle-time-ms", type=float, metavar="MS", help="MXPLUGIN_CYCLE_TIME")
    tune.add_argument("--cache-capacity", type=int, metavar="N", help="MXPLUGIN_CACHE_CAPACITY")
    tune.add_argument("--disable-cache", action="store_true", help="MXPLUGIN_CACHE_CAPACITY=0")
    _flag_pair(tune, "hierarchical-allreduce", "hierarchical_allreduce",
               "MXPLUGIN_HIERARCHICAL_ALLREDUCE=1 (--no-hierarchical-allreduce: 0)")
    tune.add_argument("--num-nccl-streams", type=int, metavar="N", help="MXPLUGIN_NUM_STREAMS")
    _flag_pair(tune, "mpi-threads-disable", "mpi_threads_disable",
               "MXPLUGIN_MPI_THREADS=funneled (--no-mpi-threads-disable: multiple)")
    auto = parser.add_argument_group("horovodrun's autotune options")
    _flag_pair(auto, "autotune", "autotune", "MXPLUGIN_AUTOTUNE=1 (--no-autotune: 0)")
    auto.add_argument("--autotune-log-file", metavar="FILE", help="MXPLUGIN_AUTOTUNE_LOG")
    auto.add_argument("--autotune-warmup-samples", type=int, metavar="N", help="MXPLUGIN_AUTOTUNE_WARMUP_STEPS")
    auto.add_argument("--autotune-steps-per-sample", type=int, metavar="N",
                      help="MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE")
    tl = parser.add_argument_group("horovodrun's timeline, stall check and logging options")
    _flag_pair(tl, "timeline-mark-cycles", "timeline_mark_cycles", "MXPLUGIN_TIMELINE_MARK_CYCLES=1")
    _flag_pair(tl, "stall-check", "stall_check", "stall warnings on (--no-stall-check: off)")
    tl.add_argument("--stall-check-warning-time-seconds", type=float, metavar="S",
                    help="MXPLUGIN_STALL_CHECK_TIME_SECONDS")
    tl.add_argument("--stall-check-shutdown-time-seconds", type=float, metavar="S",
                    help="MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS")
    tl.add_argument("--log-level", type=str.lower, choices=("trace", "debug", "info", "warning", "error", "fatal"),
                    metavar="LEVEL", help="MXPLUGIN_LOG_LEVEL (fatal: error)")
    tl.add_argument("--prefix-output-with-timestamp", "-prefix-timestamp", action="store_true",
                    help="start every line a rank prints with the time")
    stamped = ("mxplugin's log lines carry no timestamp; --prefix-output-with-timestamp stamps every line a rank "
               "prints")
    tl.add_argument("--log-with-timestamp", "--no-log-hide-timestamp", action=Refused, nargs=0, why=stamped,
                    help=f"refused: {stamped}")
    for option, why in ACCEPTED_AS_IS.items():
        tl.add_argument(option, action="store_true", dest=f"accepted_{option[2:].replace('-', '_')}",
                        help=f"accepted: {why}")
    refused = parser.add_argument_group("horovodrun's options refused, each saying why")
    for option, (nargs, why) in REFUSED.items():
        refused.add_argument(option, action=Refused, nargs=nargs, why=why, help=why,
                             **({"metavar": "X"} if nargs else {}))
    return parser


# --config-file's keys: (section, key) -> the option's dest, or a refusal.
CONFIG_KEYS = {
    ("params", "fusion_threshold_mb"): "fusion_threshold_mb", ("params", "cycle_time_ms"): "cycle_time_ms",
    ("params", "cache_capacity"): "cache_capacity", ("params", "hierarchical_allreduce"): "hierarchical_allreduce",
    ("autotune", "enabled"): "autotune", ("autotune", "log_file"): "autotune_log_file",
    ("autotune", "warmup_samples"): "autotune_warmup_samples",
    ("autotune", "steps_per_sample"): "autotune_steps_per_sample",
    ("timeline", "filename"): "timeline", ("timeline", "mark_cycles"): "timeline_mark_cycles",
    ("stall_check", "enabled"): "stall_check",
    ("stall_check", "warning_time_seconds"): "stall_check_warning_time_seconds",
    ("stall_check", "shutdown_time_seconds"): "stall_check_shutdown_time_seconds",
    ("library_options", "mpi_threads_disable"): "mpi_threads_disable",
    ("library_options", "num_nccl_streams"): "num_nccl_streams",
    ("logging", "level"): "log_level",
}
CONFIG_REFUSED = {
    ("params", "hierarchical_allgather"): "--hierarchical-allgather",
    ("autotune", "bayes_opt_max_samples"): "--autotune-bayes-opt-max-samples",
    ("autotune", "gaussian_process_noise"): "--autotune-gaussian-process-noise",
    ("library_options", "gloo_timeout_seconds"): "--gloo-timeout-seconds",
    ("library_options", "ccl_bgt_affinity"): None,
    ("library_options", "thread_affinity"): "--thread-affinity",
}


def read_config(path, args):
    """Sets on `args` what --config-file `path` says, where the command line said nothing."""
    try:
        import yaml
    except ImportError:
        raise UsageError(f"--config-file {path}: reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
    except OSError as exc:
        raise UsageError(f"--config-file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--config-file {path}: not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(config, dict):
        raise UsageError(f"--config-file {path}: expected sections (params, autotune, ...), got {type(config).__name__}")
    for section, values in config.items():
        if section == "verbose":
            args.verbose = args.verbose or bool(values)
            continue
        if section == "controller":
            if str(values).lower() != "mpi":
                raise UsageError(f"--config-file {path}: controller {values}: {GLOO}")
            continue
        if not isinstance(values, dict):
            raise UsageError(f"--config-file {path}: section {section!r} holds no keys")
        for key, value in values.items():
            where = (section, key)
            if where in CONFIG_REFUSED:
                option = CONFIG_REFUSED[where]
                why = REFUSED[option][1] if option else "mxplugin has no oneCCL"
                if value not in (None, False):
                    raise UsageError(f"--config-file {path}: {section}.{key}: {why}")
                continue
            if where == ("logging", "hide_timestamp"):
                if value is False:
                    raise UsageError(f"--config-file {path}: logging.hide_timestamp false: mxplugin's log lines "
                                     "carry no timestamp")
                continue
            if where not in CONFIG_KEYS:
                raise UsageError(f"--config-file {path}: {section}.{key} is not a horovodrun setting")
            dest = CONFIG_KEYS[where]
            if getattr(args, dest, None) is None:
                setattr(args, dest, str(value).lower() if dest == "log_level" else value)


def _bool(value):
    return "1" if value else "0"


def rank_variables(args):
    """{MXPLUGIN_* variable: value} the horovodrun options ask for."""
    out = {}
    if args.fusion_threshold_mb is not None:
        out["MXPLUGIN_FUSION_THRESHOLD"] = str(int(float(args.fusion_threshold_mb) * MB))
    if args.cycle_time_ms is not None:
        out["MXPLUGIN_CYCLE_TIME"] = f"{float(args.cycle_time_ms):g}"
    if args.cache_capacity is not None:
        out["MXPLUGIN_CACHE_CAPACITY"] = str(int(args.cache_capacity))
    if args.disable_cache:
        out["MXPLUGIN_CACHE_CAPACITY"] = "0"
    if args.hierarchical_allreduce is not None:
        out["MXPLUGIN_HIERARCHICAL_ALLREDUCE"] = _bool(args.hierarchical_allreduce)
    if args.num_nccl_streams is not None:
        out["MXPLUGIN_NUM_STREAMS"] = str(int(args.num_nccl_streams))
    if args.mpi_threads_disable is not None:
        out["MXPLUGIN_MPI_THREADS"] = "funneled" if args.mpi_threads_disable else "multiple"
    if args.autotune is not None:
        out["MXPLUGIN_AUTOTUNE"] = _bool(args.autotune)
    for dest, name in (("autotune_log_file", "MXPLUGIN_AUTOTUNE_LOG"),
                       ("autotune_warmup_samples", "MXPLUGIN_AUTOTUNE_WARMUP_STEPS"),
                       ("autotune_steps_per_sample", "MXPLUGIN_AUTOTUNE_STEPS_PER_SAMPLE")):
        if getattr(args, dest) is not None:
            out[name] = str(getattr(args, dest))
    if args.timeline_mark_cycles is not None:
        out["MXPLUGIN_TIMELINE_MARK_CYCLES"] = _bool(args.timeline_mark_cycles)
    if args.stall_check_warning_time_seconds is not None:
        out["MXPLUGIN_STALL_CHECK_TIME_SECONDS"] = f"{float(args.stall_check_warning_time_seconds):g}"
    if args.stall_check_shutdown_time_seconds is not None:
        out["MXPLUGIN_STALL_SHUTDOWN_TIME_SECONDS"] = f"{float(args.stall_check_shutdown_time_seconds):g}"
    if args.stall_check is False:
        out["MXPLUGIN_STALL_CHECK_TIME_SECONDS"] = "0"  # 0: no stall warnings (src/common/config.h)
    if args.log_level is not None:
        out["MXPLUGIN_LOG_LEVEL"] = "error" if args.log_level == "fatal" else args.log_level
    if args.tcp:
        out["UCX_TLS"] = "tcp,sm,self"
        out["OMPI_MCA_btl"] = "tcp,vader,self"
        out["OMPI_MCA_pml"] = "ob1"
    return out


def apply(args):
    """Folds the horovodrun options into mxplugin-run's own (`args`, in
    place) and returns the ranks' variables they set."""
    if args.config_file:
        read_config(args.config_file, args)
    if args.start_timeout is not None:
        args.ssh_connect_timeout = args.start_timeout
    if args.network_interfaces:
        names = [n for n in args.network_interfaces.split(",") if n]
        if len(names) != 1:
            raise UsageError(f"--network-interfaces {args.network_interfaces}: MPI talks over one interface here; "
                             "give one name")
        args.network_interface = names[0]
    if args.ssh_port is not None or args.ssh_identity_file:
        if shlex.split(args.rsh)[:1] != ["ssh"]:
            raise UsageError("--ssh-port and --ssh-identity-file are options of ssh; the remote shell is "
                             f"{args.rsh!r}: put them in --rsh")
        extra = (["-p", str(args.ssh_port)] if args.ssh_port is not None else []) + (
            ["-i", args.ssh_identity_file] if args.ssh_identity_file else [])
        args.rsh = shlex.join(shlex.split(args.rsh) + extra)
    args.mpi_extra = shlex.split(args.mpi_args or "") + shlex.split(args.binding_args or "")
    if args.slots_per_host is not None and args.slots_per_host < 1:
        raise UsageError(f"--slots-per-host must be at least 1, got {args.slots_per_host}")
    return rank_variables(args)
