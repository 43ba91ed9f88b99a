"""Every timeout, grace and period of the launcher and of the elastic
ranks' talk with it, in seconds, in one table, with the order they must
keep checked at import (a table edited against its own rules fails at
once, naming the rule).

Imports nothing: mxplugin's ranks load it too."""

# -- the ranks' talk with the elastic launcher (Note [Partitions] in world_end.py) ------------------
# A plain request's bound.
REQUEST_TIMEOUT_S = 30
# The launcher answers a rank's long poll (/broken) within LONG_POLL_S and
# the rank asks again at once; a rank not heard from for RANK_SILENT_S is
# taken for cut off; a rank that hears nothing for LAUNCHER_GONE_S leaves.
LONG_POLL_S = 5
RANK_SILENT_S = 15
LAUNCHER_GONE_S = 20
# How much later than asked a long poll's answer may come (the launcher's
# load, the network) before the request counts as failed.
ANSWER_SLACK_S = 5
# The longest a long poll may ask to be held.
MAX_WAIT_S = 600.0

# -- an elastic rank's own life (runner.py, last_words.py) -------------------------------------------
# How long a leaving rank waits for its core's thread to park (it does
# within a poll, 0.2 ms, unless a transfer is blocked inside MPI).
LEAVE_WORLD_S = 0.1
# How long a rank's last words may take before it ends anyway.
LAST_WORDS_S = 1.0
# How long a rank leaving for new hosts waits for its peers to leave (Note
# [Leaving together] in runner.py).
LEAVE_TOGETHER_S = 30.0
# A gap of the watcher's clock this long means the process was stopped
# (Note [Frozen ranks] in runner.py); the watcher's clock ticks this often.
FROZEN_GAP_S = 2.0
FREEZE_TICK_S = 0.05

# -- the elastic launcher's view of a world (world_end.py, start_failures.py, driver.py) -------------
# How long mpiexec may take to end once every rank the launcher can hear
# from has left or ended.
MPIEXEC_GRACE_S = 2.0
# How long ranks still running when their world is over get to hand their
# state over and leave, and how long without a word from any of them ends
# that wait sooner.
SETTLE_S = 30
SETTLE_QUIET_S = 3
# How long ranks that have not registered when their world is broken get
# to do so (Note [Ranks that never started] in world_record.py).
START_GRACE_S = 5
# How long after a world began every rank's agent must have said hello
# while no rank has registered (Note [Hosts a world cannot start on]).
START_HELLO_S = 30
# MXPLUGIN_PEER_TIMEOUT_SECONDS for the ranks of an elastic job unless the
# user sets it.
ELASTIC_PEER_TIMEOUT_S = 30
# The host discovery script's bound.
SCRIPT_TIMEOUT_S = 30
# How long a host back from its cool-down may take to connect to the
# launcher (Note [Hosts that cannot reach the launcher] in driver.py).
REACH_BACK_S = 5.0
# How often a rank's segment keeper looks at its mappings (segments.py).
SEGMENT_SCAN_S = 0.25
# How long a rank's agent waits, once the rank has ended, for its output
# reader to pass the rest of the rank's output on and write the end record
# (Note [A rank's agent] in rank_agent.py): a launcher that stopped reading
# must not keep the agent, and MPICH's view of the rank, alive.
AGENT_RECORD_S = 5.0

# -- any job's end (mxplugin_run/job.py, lost_hosts.py: Notes [Bounded stops], [Lost hosts]) -------
# After an interrupt mpiexec gets FORCE_AFTER_S to stop the job, then the
# stop is forced; after GIVE_UP_AFTER_S mpiexec is abandoned.
FORCE_AFTER_S = 3.0
GIVE_UP_AFTER_S = 6.0
# Output still in the pipes after mpiexec ended: how long to wait for it,
# and after mpiexec was abandoned.
DRAIN_S = 10.0
DRAIN_ABANDONED_S = 1.0
# A plain job's mpiexec waiting only for hosts the ranks named unreachable,
# or only for remote shells that have ended, is given up on after these;
# the launcher looks this often.
NAMED_GRACE_S = 2.0
ORPHANED_GRACE_S = 5.0
LOOK_EVERY_S = 1.0
# A stopped launcher exits within this (Note [Bounded stops]).
STOP_BOUND_S = 10.0

# The order the table must keep, each with why.
ORDER = (
    (("LONG_POLL_S", "RANK_SILENT_S"), "a rank that polls is never taken for silent"),
    (("RANK_SILENT_S", "LAUNCHER_GONE_S"), "the launcher gives up on a cut-off rank before the rank gives up on it"),
    (("LONG_POLL_S", "MAX_WAIT_S"), "the watcher's long poll is one the service accepts"),
    (("FREEZE_TICK_S", "FROZEN_GAP_S"), "a tick of the watcher's clock is no gap"),
    (("SETTLE_QUIET_S", "SETTLE_S"), "a quiet spell ends the settling wait sooner, never later"),
    (("FORCE_AFTER_S", "GIVE_UP_AFTER_S"), "a stop is forced before mpiexec is abandoned"),
    (("GIVE_UP_AFTER_S", "STOP_BOUND_S"), "mpiexec is abandoned within the stop's bound"),
    (("DRAIN_ABANDONED_S", "DRAIN_S"), "an abandoned mpiexec's pipes are drained for less"),
    (("LOOK_EVERY_S", "NAMED_GRACE_S"), "the launcher looks at least once within a grace"),
)


def check_order(table):
    """Raises ValueError naming every rule of ORDER that `table` (name ->
    seconds) breaks, and every value that is not a positive number."""
    broken = [f"{name} = {value!r} is not a positive number of seconds" for name, value in table.items()
              if name.endswith("_S") and not (isinstance(value, (int, float)) and value > 0)]
    if not broken:
        broken = [f"{shorter} ({table[shorter]:g} s) must be less than {longer} ({table[longer]:g} s): {why}"
                  for (shorter, longer), why in ORDER if not table[shorter] < table[longer]]
        if not table["GIVE_UP_AFTER_S"] + table["DRAIN_ABANDONED_S"] < table["STOP_BOUND_S"]:
            broken.append("GIVE_UP_AFTER_S + DRAIN_ABANDONED_S must be less than STOP_BOUND_S: a stopped "
                          "launcher exits within its bound")
    if broken:
        raise ValueError("timeouts: " + "; ".join(broken))


check_order({k: v for k, v in globals().items() if k.endswith("_S")})
