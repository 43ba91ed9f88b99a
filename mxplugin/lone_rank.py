"""A rank alone where its launcher started several: the check init() makes.

Note [Lone ranks]: MPI_Init of one MPI under the launcher of another (Open
MPI's mpirun starting a build against MPICH, MPICH's mpiexec one against
Open MPI), or under Slurm's srun without a PMI plugin (`srun -n 2` where the
site's MpiDefault is none), does not fail: each process finds no process
manager it understands and makes a world of one. N such "jobs" each train
alone on their part of the data and exit 0: silently wrong. The launchers
say in the environment how many processes they started, so a rank whose
world has one process while its launcher's variables say more stops at
init(), naming both sides.
"""
import os

from mxplugin.errors import MXPluginError
from mxplugin_run.mpi_family import first_line

# (variable, what set it): the launcher's own count of the processes it started.
_COUNTS = (
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's launcher (mpirun/prterun)"),
    ("PMI_SIZE", "an MPICH-family launcher (MPICH's or Intel MPI's mpiexec, or srun with PMI-2)"),
    ("MPI_LOCALNRANKS", "an MPICH-family launcher (Hydra's mpiexec)"),
    ("SLURM_STEP_NUM_TASKS", "Slurm's srun"),
)


def launcher_count(env):
    """(processes started, who said so) from the first launcher variable
    that gives more than one, else (1, None)."""
    for name, who in _COUNTS:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 1:
            return int(value), f"{who} ({name}={value})"
    return 1, None


def _advice(env, name):
    if name.startswith("Slurm") and "PMI_SIZE" not in env and "PMIX_RANK" not in env:
        return ("srun gave the tasks no PMI, so they cannot find each other: add --mpi=pmi2 to srun (an MPICH "
                "build; --mpi=pmix where Slurm has PMIx), or start the job with mxplugin-run inside the allocation")
    return "Start the job with this MPI's launcher: mxplugin-run does (`mxplugin-run --check-build` names it)"


def lone_rank_message(world_size, env, our_mpi):
    """The error for a world of one under a launcher that started several,
    or None when the two agree. `our_mpi` names the MPI this build loaded."""
    if world_size != 1:
        return None
    started, who = launcher_count(env)
    if started <= 1:
        return None
    return (f"mxplugin: this process is alone in its MPI world (size 1, {our_mpi}), but {who} started {started} "
            f"processes: the launcher and the library are of different MPIs (or the launcher gave the ranks no "
            f"way to find each other), so each process would train alone.\n{_advice(env, who)}.")


def our_mpi_name(version_text, library_path):
    """A short name of the MPI library this process loaded: the first line of
    MPI_Get_library_version's text, and its path."""
    first = first_line(version_text)
    where = library_path or "from the linker search path"
    return f"{first}, {where}" if first else where


def refuse_a_lone_rank(core, size):
    """Note [Lone ranks]: a world of one where the launcher started several
    fails here, on every rank, before training (the core shut down)."""
    from mxplugin import _loader

    message = lone_rank_message(size, os.environ, our_mpi_name(_loader.mpi_library_version(), _loader.MPI_LIBRARY))
    if message:
        core.shutdown()
        raise MXPluginError(message)
