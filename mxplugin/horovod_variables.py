"""The HOROVOD_* variables Horovod 0.28.1 reads at run time, each honoured
here or named, with why, in one warning at init() (Note [Horovod's
variables])."""
import warnings

# Note [Horovod's variables]: a job written for Horovod may set any of the
# variables Horovod reads as it runs. Each is one of:
# - an alias: mxplugin reads MXPLUGIN_<name>, else HOROVOD_<name>, with the
#   same meaning (the core's Config, src/common/config.cc; the autotuner);
# - translated: Horovod's name or values differ; init() sets the MXPLUGIN_*
#   variable from it unless that is set already;
# - true as it stands here (mxplugin's log lines carry no timestamp to
#   hide; its process sets may be added at any time);
# - not applicable: rank 0 names it, with why, in one warning, and nothing
#   else changes. A variable that is none of these is not Horovod's.
ALIASES = frozenset({
    "FUSION_THRESHOLD", "CYCLE_TIME", "CACHE_CAPACITY", "HIERARCHICAL_ALLREDUCE", "NUM_NCCL_STREAMS",
    "STALL_CHECK_TIME_SECONDS", "STALL_SHUTDOWN_TIME_SECONDS", "TIMELINE", "TIMELINE_MARK_CYCLES", "AUTOTUNE",
    "AUTOTUNE_LOG", "AUTOTUNE_STEPS_PER_SAMPLE", "LOG_LEVEL"})
AS_IT_STANDS = frozenset({"LOG_HIDE_TIME", "DYNAMIC_PROCESS_SETS"})
# Horovod's name -> (mxplugin's variable, its value for Horovod's value:
# "" nothing to set, None not applicable).
TRANSLATED = {
    "MPI_THREADS_DISABLE": ("MXPLUGIN_MPI_THREADS", lambda v: "funneled" if v not in ("", "0") else "multiple"),
    "AUTOTUNE_WARMUP_SAMPLES": ("MXPLUGIN_AUTOTUNE_WARMUP_STEPS", lambda v: v),
    "STALL_CHECK_DISABLE": ("MXPLUGIN_STALL_CHECK_TIME_SECONDS", lambda v: "0" if v not in ("", "0") else ""),
    "CONTROLLER": (None, lambda v: "" if v.lower() == "mpi" else None),
    "CPU_OPERATIONS": (None, lambda v: "" if v.lower() == "mpi" else None),
}
NOT_APPLICABLE = {
    "HIERARCHICAL_ALLGATHER": "mxplugin's allgather has no hierarchical variant",
    "AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "mxplugin's autotune tries a fixed set of bucket sizes",
    "AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "mxplugin's autotune tries a fixed set of bucket sizes",
    "BATCH_D2D_MEMCOPIES": "mxplugin copies GPU tensors into its fusion buffer with its own kernel",
    "CCL_CACHE": "mxplugin has no oneCCL", "GLOO_IFACE": "mxplugin runs over MPI, not Gloo",
    "GLOO_TIMEOUT_SECONDS": "mxplugin runs over MPI, not Gloo",
    "ADASUM_MPI_CHUNK_SIZE": "mxplugin has no Adasum", "THREAD_AFFINITY": "mxplugin does not pin its thread",
    "DISABLE_GROUP_FUSION": "grouped collectives are always fused together",
    "DISABLE_NVTX_RANGES": "mxplugin marks no NVTX ranges", "ENABLE_ASYNC_COMPLETION": "completion is always "
    "asynchronous", "ENABLE_XLA_OPS": "TensorFlow's", "ELASTIC": "horovodrun's own; mxplugin-run's elastic "
    "options start elastic jobs",
    "CONTROLLER": "mxplugin's controller is MPI", "CPU_OPERATIONS": "mxplugin's CPU operations are MPI's",
}


def read(environ):
    """({MXPLUGIN_* variable: value} to set from Horovod's translated
    variables, [(name, value, why)] of those not applicable here)."""
    to_set, ignored = {}, []
    for name, value in sorted(environ.items()):
        if not name.startswith("HOROVOD_") or not value:
            continue
        short = name[len("HOROVOD_"):]
        if short in ALIASES or short in AS_IT_STANDS:
            continue
        if short in TRANSLATED:
            target, convert = TRANSLATED[short]
            converted = convert(value)
            if converted is None:
                ignored.append((name, value, NOT_APPLICABLE.get(short, "no meaning here")))
            elif converted and target not in environ:
                to_set[target] = converted
            continue
        if short in NOT_APPLICABLE:
            ignored.append((name, value, NOT_APPLICABLE[short]))
    return to_set, ignored


def apply(environ):
    """Sets the translated variables in `environ` (before the core reads
    them); returns the ignored ones for warn()."""
    to_set, ignored = read(environ)
    environ.update(to_set)
    return ignored


def warn(ignored, rank):
    """On rank 0, one warning naming every variable of Horovod's that means nothing here."""
    if ignored and rank == 0:
        listed = "; ".join(f"{name}={value} ({why})" for name, value, why in ignored)
        warnings.warn(f"mxplugin ignores these variables of Horovod's: {listed}", UserWarning, stacklevel=3)
