"""A rank's phase, told to its agent before the rank enters it (Note [A
rank's agent] in rank_agent.py). Imports nothing of the launcher's but the
standard library: mxplugin's ranks load it.

A rank starts in STARTING (the agent's word for it until the rank says
otherwise: loading, then inside MPI's start), says RUNNING once MPI's start
is over, LEAVING when it has decided to leave its world (an elastic rank
handing over after a failure or for new hosts) and DONE when its work is
finished (its training function returned, or shutdown() began). The agent
puts the last phase said in the rank's end record, so a crash is read by
where it came: one in STARTING or LEAVING is collateral (Note [One rule for
a world's end] in elastic/rank_ends.py)."""
import os

STARTING, RUNNING, LEAVING, DONE = "starting", "running", "leaving", "done"
PHASES = (STARTING, RUNNING, LEAVING, DONE)
# "<descriptor>:<agent's pid>": where the agent reads the phases; set by the
# agent in its rank's environment.
ENV_AGENT = "MXPLUGIN_AGENT"


def tell(phase):
    """Tells this process's agent that it enters `phase` (one of PHASES);
    whether it could. Only the agent's own child tells it: a process the
    rank started inherits the variable, not the descriptor's meaning."""
    if phase not in PHASES:
        raise ValueError(f"{phase!r} is not a rank phase; phases are {', '.join(PHASES)}")
    where = os.environ.get(ENV_AGENT, "")
    fd, _, agent = where.partition(":")
    if not (fd.isdigit() and agent.isdigit()) or os.getppid() != int(agent):
        return False
    try:
        # One write of a few bytes: a pipe never splits it, and it is in the
        # pipe before the rank takes its next step.
        os.write(int(fd), f"{phase}\n".encode())
    except OSError:
        return False
    return True
